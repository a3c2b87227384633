"""The domain's own shapes of a tool call and its result (no protobuf here)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import orjson

from runtime.errors import ToolFailure


def encode_json(value: Any) -> bytes:
    """`value` as compact UTF-8 JSON, non-ASCII kept as it is. orjson for
    speed; what it refuses (a non-string key, an integer beyond 64 bits)
    the standard encoder writes as it always did."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode(
            "utf-8", "surrogatepass"
        )


@dataclass(frozen=True)
class ToolCall:
    """The provider-neutral form of one call the model asked for."""

    id: str
    name: str
    # The JSON object text exactly as the model wrote it.
    arguments_json: str


@dataclass(frozen=True)
class ToolErrorInfo:
    code: str
    message: str
    retryable: bool = False


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    output: dict[str, Any] = field(default_factory=dict)
    error: ToolErrorInfo | None = None
    duration_ms: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None

    @cached_property
    def _encoded(self) -> tuple[str, int]:
        # Encoded once: the reply, the journal (its durable row holds this
        # text) and the audit log (its size) all want it, and a read_file's
        # content is tens of kilobytes.
        data = encode_json(self.output)
        return data.decode("utf-8", "surrogatepass"), len(data)

    @property
    def output_json(self) -> str:
        return self._encoded[0]

    @property
    def output_bytes(self) -> int:
        """The size of `output_json` in bytes of UTF-8."""
        return self._encoded[1]

    @classmethod
    def failed(cls, call_id: str, failure: ToolFailure, duration_ms: int = 0) -> ToolResult:
        info = ToolErrorInfo(failure.code, failure.message, failure.retryable)
        return cls(call_id, failure.output, info, duration_ms)
