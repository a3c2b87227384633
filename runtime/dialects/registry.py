"""Dialect names (as `ListTools` / `ExecuteMessage` spell them) → their functions."""

from __future__ import annotations

import json
from typing import Any

from runtime.dialects import anthropic, gemini, mcp, neutral, openai_chat, openai_responses
from runtime.dialects.common import Catalog, Dialect, is_unicode, load_message
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
    calls = get_dialect(name).parse(load_message(message_json))
    # JSON's \uXXXX escapes can spell half of a surrogate pair: such an id or
    # name could be neither journaled nor sent back (protobuf and the
    # rendered results are UTF-8). What the model wrote, the arguments, is the
    # registry's to judge (INVALID_ARGUMENTS in that call's result).
    for index, call in enumerate(calls):
        for field, value in (("id", call.id), ("name", call.name)):
            if not is_unicode(value):
                msg = (
                    f"message_json: the {field} of tool call {index} contains a lone surrogate "
                    "(a \\uD800-\\uDFFF escape without its pair); it must be valid Unicode"
                )
                raise BadRequest(msg)
    return calls


def render_results(name: str, calls: list[ToolCall], results: list[ToolResult]) -> str:
    rendered: Any = get_dialect(name).render(calls, results)
    return json.dumps(rendered, ensure_ascii=False)
