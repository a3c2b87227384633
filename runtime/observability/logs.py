"""The daemon's log format: text for terminals, JSON lines for machines.

A JSON line carries `ts`, `level`, `logger`, `message`, and `session_id` /
`call_id` when the record is about one: taken from the record's `extra`, else
from the context the RPC or call runs in (`log_context`), so a log line
deep in a tool knows its call without being told. Log lines carry metadata
and sizes, never arguments or outputs (STYLE).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import IO

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Set for the duration of an RPC that names a session, and of each tool call.
_SESSION_ID: ContextVar[str] = ContextVar("toolrt_session_id", default="")
_CALL_ID: ContextVar[str] = ContextVar("toolrt_call_id", default="")
FIELDS = ("session_id", "call_id")


@contextlib.contextmanager
def log_context(session_id: str = "", call_id: str = "") -> Iterator[None]:
    """Lines logged inside carry these ids (those left empty are inherited)."""
    tokens = []
    if session_id:
        tokens.append((_SESSION_ID, _SESSION_ID.set(session_id)))
    if call_id:
        tokens.append((_CALL_ID, _CALL_ID.set(call_id[:256])))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        ids = {"session_id": _SESSION_ID.get(), "call_id": _CALL_ID.get()}
        for name in FIELDS:
            value = getattr(record, name, "") or ids[name]
            if value:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def formatter(log_format: str) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)


def configure_logging(level: str, log_format: str, stream: IO[str] | None = None) -> None:
    """The root logger at `level`, writing `log_format` lines to `stream` (stderr)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
