"""Turning raw command output into text the model can use, within caps."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

from runtime.agent.redact import Redactor, Stream
from runtime.models import encode_json

# What a session without secrets redacts: nothing.
NO_SECRETS = Redactor()

SURROGATES = re.compile("[\ud800-\udfff]")

# CSI, OSC (terminated by BEL or ST), and the remaining two-byte escapes:
# colours and cursor moves mean nothing to a model and cost tokens.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def _decode(data: bytes) -> tuple[str, bool]:
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), True


def render_stream(
    head: bytes, tail: bytes, total: int, dropped_lines: int = 0, redactor: Redactor | None = None
) -> tuple[str, bool]:
    """Head + marker + tail as text (`total` bytes were written, `dropped_lines`
    lines fell between head and tail); and whether invalid UTF-8 was replaced.

    The agent redacted the bytes; stripping colour codes can join the pieces
    of a secret they split, so each side is redacted again once stripped,
    with what a cut left of a secret at its edge.
    """
    redactor = redactor or NO_SECRETS
    dropped = total - len(head) - len(tail)
    text_head, bad_head = _decode(head)
    text_tail, bad_tail = _decode(tail)
    bad = bad_head or bad_tail
    if dropped <= 0:
        return redactor.redact_text(strip_ansi(text_head + text_tail)), bad
    marker = (
        f"\n[... {dropped} bytes ({dropped_lines} lines) dropped; kept the first {len(head)} "
        f"and the last {len(tail)} bytes ...]\n"
    )
    text_head = redactor.redact_text(strip_ansi(text_head), cut_after=True)
    text_tail = redactor.redact_text(strip_ansi(text_tail), cut_before=True)
    return text_head + marker + text_tail, bad


def _middle_cut(text: str, keep: int) -> str:
    if len(text) <= keep:
        return text
    head = keep // 5
    tail = keep - head
    dropped = len(text) - keep
    marker = f"\n[... {dropped} characters dropped to fit the result size ...]\n"
    return text[:head] + marker + text[len(text) - tail :]


def map_strings(value: Any, change: Callable[[str], str]) -> tuple[Any, bool]:
    """`value` (JSON data) with `change` applied to every string in it, keys
    included; and whether any string changed (if none did, `value` itself)."""
    if isinstance(value, str):
        new = change(value)
        return new, new != value
    if isinstance(value, dict):
        changed = False
        out: dict[Any, Any] = {}
        for key, item in value.items():
            new_key, key_changed = map_strings(key, change)
            out[new_key], item_changed = map_strings(item, change)
            changed = changed or key_changed or item_changed
        return (out, True) if changed else (value, False)
    if isinstance(value, list):
        items = [map_strings(item, change) for item in value]
        if any(changed for _, changed in items):
            return [item for item, _ in items], True
        return value, False
    return value, False


def _valid_unicode(text: str) -> str:
    if text.isascii():  # far cheaper than the scan below
        return text
    return SURROGATES.sub("\ufffd", text)


def without_surrogates(value: Any) -> tuple[Any, bool]:
    """`value` with every lone surrogate in its strings (a file name that is
    not UTF-8, as Python decodes it) replaced by U+FFFD; and whether any was."""
    return map_strings(value, _valid_unicode)


def redacted(value: Any, redactor: Redactor) -> Any:
    """`value` (valid Unicode JSON data) with the session's secrets replaced
    in every string of it: the one redaction of what a call returns."""
    if redactor.regex is None:
        return value
    return map_strings(value, redactor.redact_text)[0]


def fit_output(output: dict[str, Any], cap: int) -> dict[str, Any]:
    """Shrink the longest text fields until the encoded output fits `cap` bytes."""
    # A character encodes to at most 6 bytes (a \u escape): most results are
    # far under the cap, and are not encoded here just to be measured.
    if all(isinstance(v, str | int | float | bool) or v is None for v in output.values()):
        bound = sum(6 * len(v) for v in output.values() if isinstance(v, str))
        if bound + 64 * len(output) <= cap:
            return output
    encoded = len(encode_json(output))
    if encoded <= cap:
        return output
    fitted = dict(output)
    for _ in range(32):
        texts = [(len(v), k) for k, v in fitted.items() if isinstance(v, str)]
        if not texts:
            break
        length, key = max(texts)
        excess = encoded - cap
        fitted[key] = _middle_cut(fitted[key], max(0, length - excess - 256))
        fitted["result_truncated"] = True
        encoded = len(encode_json(fitted))
        if encoded <= cap:
            break
    return fitted


@contextlib.contextmanager
def redacted_chunks(
    redactor: Redactor, on_output: Callable[[str, bytes], None] | None
) -> Iterator[Callable[[str, bytes], None] | None]:
    """`on_output` behind the session's redaction (the per-call path wraps
    ExecuteStream's sink in it: streamed chunks leave the daemon through it),
    one stream per name (a secret split across chunks is held
    until it can be told apart); what is held goes out, redacted, at the end."""
    if on_output is None or redactor.regex is None:
        yield on_output
        return
    sink = on_output
    streams: dict[str, Stream] = {}

    def redacting(name: str, data: bytes) -> None:
        stream = streams.setdefault(name, redactor.stream())
        if kept := stream.feed(data):
            sink(name, kept)

    try:
        yield redacting
    finally:
        for name, stream in streams.items():
            if rest := stream.flush():
                sink(name, rest)
