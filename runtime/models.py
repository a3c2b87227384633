"""The domain's own shapes of a tool call and its result (no protobuf here)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from runtime.errors import ToolFailure


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
    def output_json(self) -> str:
        # Encoded once: the journal, the audit log and the reply all want it
        # (a read_file's content is tens of kilobytes).
        return json.dumps(self.output, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def failed(cls, call_id: str, failure: ToolFailure, duration_ms: int = 0) -> ToolResult:
        info = ToolErrorInfo(failure.code, failure.message, failure.retryable)
        return cls(call_id, failure.output, info, duration_ms)
