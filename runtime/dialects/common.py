"""What every dialect shares: reading untrusted provider JSON, result payloads.

Provider messages come from the agent loop, so a malformed one is the loop's
mistake: `BadRequest` (gRPC INVALID_ARGUMENT) naming the offending place as a
JSON pointer into `message_json`. What the *model* wrote (the arguments) is
never judged here: it travels as text to the tool registry, which answers
INVALID_ARGUMENTS inside the call's result so the model can correct itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from runtime.errors import BadRequest
from runtime.json_shape import MAX_ITEMS, json_shape
from runtime.models import ToolCall, ToolResult

Catalog = list[dict[str, Any]]
# A message's array elements and object members, all its calls' together:
# room for a call whose arguments hold more than a call may (its result says
# so), while parsing the message stays cheap.
MAX_MESSAGE_ITEMS = 4 * MAX_ITEMS


class CatalogExporter(Protocol):
    def __call__(self, neutral: Catalog) -> Any: ...


class MessageParser(Protocol):
    def __call__(self, message: Any) -> list[ToolCall]: ...


class ResultRenderer(Protocol):
    def __call__(self, calls: list[ToolCall], results: list[ToolResult]) -> Any: ...


@dataclass(frozen=True)
class Dialect:
    """One provider's shapes: catalog out, tool calls in, results out."""

    name: str
    catalog: CatalogExporter
    parse: MessageParser
    render: ResultRenderer


def at(where: str, key: str | int) -> str:
    """`where` extended by one JSON pointer step."""
    step = str(key).replace("~", "~0").replace("/", "~1")
    return f"{where}/{step}"


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "number" if isinstance(value, int | float) else type(value).__name__
    )


def refuse(where: str, expected: str, value: Any) -> BadRequest:
    return BadRequest(f"message_json{where or '/'}: expected {expected}, got {_kind(value)}")


def is_unicode(text: str) -> bool:
    """False for text holding a lone surrogate (which no UTF-8 encoder takes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def load_message(text: str) -> Any:
    """The request's `message_json`, parsed; BadRequest if it is not JSON."""
    _, items = json_shape(text, MAX_MESSAGE_ITEMS)
    if items > MAX_MESSAGE_ITEMS:
        msg = f"message_json holds more than {MAX_MESSAGE_ITEMS} items; a model turn is smaller"
        raise BadRequest(msg)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        msg = f"message_json is not valid JSON: {exc}"
        raise BadRequest(msg) from exc


def as_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise refuse(where, "an object", value)
    return value


def as_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise refuse(where, "an array", value)
    return value


def optional_list(obj: dict[str, Any], key: str, where: str) -> list[Any]:
    """`obj[key]` as a list; absent or null (as `model_dump()` writes) is empty."""
    value = obj.get(key)
    return [] if value is None else as_list(value, at(where, key))


def text_field(obj: dict[str, Any], key: str, where: str) -> str:
    """A required non-empty string member."""
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise refuse(at(where, key), "a non-empty string", value)
    return value


def first_key(obj: dict[str, Any], keys: tuple[str, ...]) -> tuple[str, Any]:
    """The first of `keys` present with a non-null value (camelCase or snake_case)."""
    for key in keys:
        if obj.get(key) is not None:
            return key, obj[key]
    return keys[0], None


def arguments_object(obj: dict[str, Any], key: str, where: str) -> str:
    """An arguments member that providers send as a JSON object, as text."""
    value = obj.get(key)
    if value is None:
        return "{}"
    if not isinstance(value, dict):
        raise refuse(at(where, key), "an object", value)
    return json.dumps(value, ensure_ascii=False)


def arguments_string(obj: dict[str, Any], key: str, where: str) -> str:
    """An arguments member that providers send as JSON text, kept verbatim."""
    value = obj.get(key)
    if not isinstance(value, str):
        raise refuse(at(where, key), "a string of JSON", value)
    return value


def error_object(result: ToolResult) -> dict[str, Any]:
    """`{"error": {code, message}}`, plus what the call produced before failing."""
    error = result.error
    code, message = (error.code, error.message) if error else ("INTERNAL", "no error recorded")
    payload: dict[str, Any] = {"error": {"code": code, "message": message}}
    if result.output:
        payload["output"] = result.output
    return payload


def payload(result: ToolResult) -> dict[str, Any]:
    """What the model reads: the output, or the error object on failure."""
    return result.output if result.ok else error_object(result)


def payload_text(result: ToolResult) -> str:
    return json.dumps(payload(result), ensure_ascii=False)


def check_pairs(calls: list[ToolCall], results: list[ToolResult]) -> None:
    """Renderers get one result per call, in call order."""
    if [c.id for c in calls] != [r.call_id for r in results]:
        msg = "results do not match the calls one to one, in order"
        raise ValueError(msg)
