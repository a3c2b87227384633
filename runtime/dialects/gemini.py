"""Gemini: `functionCall` parts in, one `user` Content of `functionResponse` parts out.

The message is the candidate's `Content` (or the candidate itself). Both the
REST API's camelCase (`functionCall`) and the Python SDK's snake_case
`model_dump()` (`function_call`, with nulls for unset fields) are accepted;
output is camelCase, which the REST API and `types.Content` both take.
Gemini does not always give calls an id: toolrt then makes one up for the
neutral result (so a replay of such a message is not recognised as one) and
leaves `id` out of the functionResponse, as the provider expects.
"""

from __future__ import annotations

import uuid
from typing import Any

from runtime.dialects import schema
from runtime.dialects.common import (
    Catalog,
    arguments_object,
    as_object,
    at,
    check_pairs,
    first_key,
    optional_list,
    refuse,
    text_field,
)
from runtime.dialects.images import PNG, split
from runtime.models import ToolCall, ToolResult

# Made-up ids start with this, so render() knows to leave them out.
GENERATED = "toolrt-gemini-"


def catalog(neutral: Catalog) -> list[dict[str, Any]]:
    declarations = [
        {
            "name": t["name"],
            "description": t["description"],
            "parameters": schema.gemini_schema(t["parameters"]),
        }
        for t in neutral
    ]
    return [{"functionDeclarations": declarations}]


def parse(message: Any) -> list[ToolCall]:
    message, where = as_object(message, ""), ""
    if "parts" not in message and isinstance(message.get("content"), dict):
        message, where = message["content"], "/content"
    calls = []
    for index, part in enumerate(optional_list(message, "parts", where)):
        part_at = at(at(where, "parts"), index)
        key, call = first_key(as_object(part, part_at), ("functionCall", "function_call"))
        if call is None:
            continue
        call_at = at(part_at, key)
        call = as_object(call, call_at)
        call_id = call.get("id")
        if call_id is not None and (not isinstance(call_id, str) or not call_id):
            raise refuse(at(call_at, "id"), "a non-empty string", call_id)
        calls.append(
            ToolCall(
                id=call_id or f"{GENERATED}{uuid.uuid4().hex}",
                name=text_field(call, "name", call_at),
                arguments_json=arguments_object(call, "args", call_at),
            )
        )
    return calls


def response_part(call: ToolCall, result: ToolResult) -> dict[str, Any]:
    parts = split(result, attach=True)
    response = {"output": parts.payload} if result.ok else parts.payload
    function_response: dict[str, Any] = {"name": call.name, "response": response}
    if parts.images:
        # Multimodal function responses: the images as parts of the response.
        function_response["parts"] = [
            {"inlineData": {"mimeType": PNG, "data": data}} for data in parts.images
        ]
    if not call.id.startswith(GENERATED):
        function_response["id"] = call.id
    return {"functionResponse": function_response}


def render(calls: list[ToolCall], results: list[ToolResult]) -> dict[str, Any]:
    check_pairs(calls, results)
    parts = [response_part(call, result) for call, result in zip(calls, results, strict=True)]
    return {"role": "user", "parts": parts}
