"""Dialect names (as `ListTools` / `ExecuteMessage` spell them) → their functions."""

from __future__ import annotations

import json
from typing import Any

from runtime.dialects import anthropic, gemini, mcp, neutral, openai_chat, openai_responses
from runtime.dialects.common import Catalog, Dialect, load_message
from runtime.errors import BadRequest
from runtime.models import ToolCall, ToolResult

DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (
        Dialect("neutral", neutral.catalog, neutral.parse, neutral.render),
        Dialect("openai", openai_chat.catalog, openai_chat.parse, openai_chat.render),
        Dialect(
            "openai-responses",
            openai_responses.catalog,
            openai_responses.parse,
            openai_responses.render,
        ),
        Dialect("anthropic", anthropic.catalog, anthropic.parse, anthropic.render),
        Dialect("gemini", gemini.catalog, gemini.parse, gemini.render),
        Dialect("mcp", mcp.catalog, mcp.parse, mcp.render),
    )
}


def get_dialect(name: str) -> Dialect:
    """The dialect called `name` ("" is neutral); BadRequest listing the known ones."""
    dialect = DIALECTS.get(name or "neutral")
    if dialect is None:
        shown = name if len(name) <= 64 else name[:61] + "..."
        msg = f"unknown dialect {shown!r}; known: {', '.join(DIALECTS)}"
        raise BadRequest(msg)
    return dialect


def export_catalog(name: str, neutral_catalog: Catalog) -> str:
    """`tools_json`: exactly what a loop passes as the provider's `tools`."""
    return json.dumps(get_dialect(name).catalog(neutral_catalog), ensure_ascii=False)


def parse_message(name: str, message_json: str) -> list[ToolCall]:
    return get_dialect(name).parse(load_message(message_json))


def render_results(name: str, calls: list[ToolCall], results: list[ToolResult]) -> str:
    rendered: Any = get_dialect(name).render(calls, results)
    return json.dumps(rendered, ensure_ascii=False)
