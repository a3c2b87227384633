"""Anthropic Messages: `tool_use` blocks in, one `user` message of `tool_result` blocks out.

The message is the assistant message (or the whole `Message` object); text,
thinking and server-tool blocks in its content are ignored.
"""

from __future__ import annotations

import json
from typing import Any

from runtime.dialects.common import (
    Catalog,
    arguments_object,
    as_object,
    at,
    check_pairs,
    optional_list,
    payload_text,
    text_field,
)
from runtime.dialects.images import PNG, split
from runtime.models import ToolCall, ToolResult


def catalog(neutral: Catalog) -> list[dict[str, Any]]:
    return [
        {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
        for t in neutral
    ]


def parse(message: Any) -> list[ToolCall]:
    message = as_object(message, "")
    if isinstance(message.get("content"), str):
        return []  # plain text: no tool use
    calls = []
    for index, block in enumerate(optional_list(message, "content", "")):
        where = at("/content", index)
        block = as_object(block, where)
        if block.get("type") != "tool_use":
            continue
        calls.append(
            ToolCall(
                id=text_field(block, "id", where),
                name=text_field(block, "name", where),
                arguments_json=arguments_object(block, "input", where),
            )
        )
    return calls


def render(calls: list[ToolCall], results: list[ToolResult]) -> dict[str, Any]:
    check_pairs(calls, results)
    blocks = []
    for result in results:
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": result.call_id,
            "content": _content(result),
        }
        if not result.ok:
            block["is_error"] = True
        blocks.append(block)
    return {"role": "user", "content": blocks}


def _content(result: ToolResult) -> str | list[dict[str, Any]]:
    """The payload's JSON text; with images, a text block and an image block each."""
    parts = split(result, attach=True)
    if not parts.images:
        return payload_text(result)
    text = {"type": "text", "text": json.dumps(parts.payload, ensure_ascii=False)}
    return [
        text,
        *(
            {"type": "image", "source": {"type": "base64", "media_type": PNG, "data": data}}
            for data in parts.images
        ),
    ]
