"""toolrt's own shapes, for loops that translate themselves.

The message is an array of `{id, name, arguments}` (`arguments` a JSON object
or its text; `arguments_json` also accepted); results are an array of
`{call_id, ok, output, error}`.
"""

from __future__ import annotations

from typing import Any

from runtime.dialects.common import (
    Catalog,
    arguments_object,
    arguments_string,
    as_list,
    as_object,
    at,
    check_pairs,
    text_field,
)
from runtime.models import ToolCall, ToolResult


def catalog(neutral: Catalog) -> Catalog:
    return neutral


def parse(message: Any) -> list[ToolCall]:
    calls = []
    for index, item in enumerate(as_list(message, "")):
        where = at("", index)
        item = as_object(item, where)
        if "arguments_json" in item:
            arguments = arguments_string(item, "arguments_json", where)
        elif isinstance(item.get("arguments"), str):
            arguments = item["arguments"]
        else:
            arguments = arguments_object(item, "arguments", where)
        calls.append(
            ToolCall(
                id=text_field(item, "id", where),
                name=text_field(item, "name", where),
                arguments_json=arguments,
            )
        )
    return calls


def render(calls: list[ToolCall], results: list[ToolResult]) -> list[dict[str, Any]]:
    check_pairs(calls, results)
    return [
        {
            "call_id": r.call_id,
            "ok": r.ok,
            "output": r.output,
            "error": None
            if r.error is None
            else {"code": r.error.code, "message": r.error.message, "retryable": r.error.retryable},
        }
        for r in results
    ]
