"""OpenAI Responses: `function_call` items in, `function_call_output` items out.

The message is the response's `output` list (or the whole response object);
reasoning items, messages and built-in tool calls in it are ignored.
"""

from __future__ import annotations

import json
from typing import Any

from runtime.dialects.common import (
    Catalog,
    arguments_string,
    as_list,
    as_object,
    at,
    check_pairs,
    payload_text,
    text_field,
)
from runtime.dialects.images import PNG, split
from runtime.dialects.openai_chat import strict_function
from runtime.models import ToolCall, ToolResult


def catalog(neutral: Catalog) -> list[dict[str, Any]]:
    return [{"type": "function", **strict_function(tool)} for tool in neutral]


def parse(message: Any) -> list[ToolCall]:
    where = ""
    if isinstance(message, dict):
        message, where = message.get("output"), "/output"
    calls = []
    for index, item in enumerate(as_list(message, where)):
        item = as_object(item, at(where, index))
        if item.get("type") != "function_call":
            continue
        calls.append(
            ToolCall(
                id=text_field(item, "call_id", at(where, index)),
                name=text_field(item, "name", at(where, index)),
                arguments_json=arguments_string(item, "arguments", at(where, index)),
            )
        )
    return calls


def render(calls: list[ToolCall], results: list[ToolResult]) -> list[dict[str, Any]]:
    check_pairs(calls, results)
    return [
        {"type": "function_call_output", "call_id": result.call_id, "output": _output(result)}
        for result in results
    ]


def _output(result: ToolResult) -> str | list[dict[str, Any]]:
    """The payload's JSON text; with images, an input_text and an input_image each."""
    parts = split(result, attach=True)
    if not parts.images:
        return payload_text(result)
    text = {"type": "input_text", "text": json.dumps(parts.payload, ensure_ascii=False)}
    images = [
        {"type": "input_image", "image_url": f"data:{PNG};base64,{data}"} for data in parts.images
    ]
    return [text, *images]
