"""OpenAI Chat Completions: `tool_calls[]` in, `role: "tool"` messages out.

The message is the assistant message (`choices[0].message`); each function
tool call carries `id`, `function.name` and `function.arguments` (JSON text,
kept verbatim so validation sees what the model wrote).
"""

from __future__ import annotations

import json
from typing import Any

from runtime.dialects import schema
from runtime.dialects.common import (
    Catalog,
    arguments_string,
    as_object,
    at,
    check_pairs,
    optional_list,
    payload_text,
    refuse,
    text_field,
)
from runtime.dialects.images import split
from runtime.models import ToolCall, ToolResult


def strict_function(tool: dict[str, Any]) -> dict[str, Any]:
    """name, description, parameters and strict, strict whenever possible."""
    try:
        parameters, strict = schema.openai_strict(tool["parameters"]), True
    except schema.NotStrict:
        parameters, strict = schema.openai_loose(tool["parameters"]), False
    return {
        "name": tool["name"],
        "description": tool["description"],
        "parameters": parameters,
        "strict": strict,
    }


def catalog(neutral: Catalog) -> list[dict[str, Any]]:
    return [{"type": "function", "function": strict_function(tool)} for tool in neutral]


def parse(message: Any) -> list[ToolCall]:
    message = as_object(message, "")
    calls = []
    for index, item in enumerate(optional_list(message, "tool_calls", "")):
        where = at("/tool_calls", index)
        item = as_object(item, where)
        if item.get("type", "function") != "function":
            raise refuse(at(where, "type"), '"function" (toolrt runs function tools)', item["type"])
        function = as_object(item.get("function"), at(where, "function"))
        calls.append(
            ToolCall(
                id=text_field(item, "id", where),
                name=text_field(function, "name", at(where, "function")),
                arguments_json=arguments_string(function, "arguments", at(where, "function")),
            )
        )
    return calls


def render(calls: list[ToolCall], results: list[ToolResult]) -> list[dict[str, Any]]:
    check_pairs(calls, results)
    return [
        {"role": "tool", "tool_call_id": result.call_id, "content": _content(result)}
        for result in results
    ]


def _content(result: ToolResult) -> str:
    """The payload's JSON text; an image (text only here) is a note and a line."""
    parts = split(result, attach=False)
    if not parts.lines:
        return payload_text(result)
    return "\n".join([json.dumps(parts.payload, ensure_ascii=False), *parts.lines])
