"""Provider dialects: tool calls in, results out, catalogs exported (pure functions).

One module per provider (`openai_chat`, `openai_responses`, `anthropic`,
`gemini`, `mcp`, and toolrt's own `neutral`), each with `catalog(neutral)`,
`parse(message) -> [ToolCall]` and `render(calls, results)`; `registry`
maps the names `ListTools`/`ExecuteMessage` accept onto them.
"""
