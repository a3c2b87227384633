"""MCP: `tools/list` entries out, `tools/call` requests in, `CallToolResult`s out.

The message is one JSON-RPC `tools/call` request or an array of them (a
batch); the JSON-RPC `id` is the call id. Results are one `CallToolResult`
per call, in order: the payload as a text block (for clients that only read
text) and as `structuredContent`, with `isError` on failures.
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
    payload,
    refuse,
    text_field,
)
from runtime.dialects.images import PNG, split
from runtime.models import ToolCall, ToolResult


def catalog(neutral: Catalog) -> list[dict[str, Any]]:
    return [
        {"name": t["name"], "description": t["description"], "inputSchema": t["parameters"]}
        for t in neutral
    ]


def parse(message: Any) -> list[ToolCall]:
    requests = message if isinstance(message, list) else [message]
    calls = []
    for index, request in enumerate(requests):
        where = at("", index) if isinstance(message, list) else ""
        request = as_object(request, where)
        if request.get("method") != "tools/call":
            raise refuse(at(where, "method"), '"tools/call"', request.get("method"))
        request_id = request.get("id")
        valid_id = isinstance(request_id, str | int) and not isinstance(request_id, bool)
        if not valid_id or request_id == "":
            raise refuse(at(where, "id"), "a JSON-RPC id (string or number)", request_id)
        params = as_object(request.get("params"), at(where, "params"))
        calls.append(
            ToolCall(
                id=str(request_id),
                name=text_field(params, "name", at(where, "params")),
                arguments_json=arguments_object(params, "arguments", at(where, "params")),
            )
        )
    return calls


def call_result(result: ToolResult) -> dict[str, Any]:
    """Text content and structured content; images as image content beside them."""
    parts = split(result, attach=True)
    images = [{"type": "image", "data": data, "mimeType": PNG} for data in parts.images]
    text = json.dumps(parts.payload, ensure_ascii=False)
    return {
        "content": [{"type": "text", "text": text}, *images],
        "structuredContent": payload(result),
        "isError": not result.ok,
    }


def render(calls: list[ToolCall], results: list[ToolResult]) -> list[dict[str, Any]]:
    check_pairs(calls, results)
    return [call_result(result) for result in results]
