"""`make bench`: toolrt measured against plain Docker and llm-sandbox."""
