"""`toolrt`, the command line: `main` parses and dispatches; one module per group of verbs.

- main.py      the parser, `call` and `cp`
- serve.py     `serve` (the gRPC daemon) and `mcp` (the MCP front on stdio)
- sessions.py  `sessions list|get|create|close`
- tokens.py    `tokens create|list|revoke` (the daemon's tokens file)
- run.py       `run` and `exec` (commands with live output)
- options.py   parsing of sizes, limits and daemon flags shared by the verbs
"""

from runtime.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
