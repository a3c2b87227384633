"""Frames spoken between the daemon and the in-sandbox agent.

Stdlib only: this module is imported by the agent inside the sandbox (any
Python >= 3.9) and by the daemon. A frame is an 8-byte header (two big-endian
u32: header length, body length), a JSON header, then raw body bytes, so file
contents and output never pass through JSON escaping.
"""

from __future__ import annotations

import json
import struct
from typing import Any

PREFIX = struct.Struct(">II")
# A frame larger than this is a protocol violation, not a big file: the
# daemon caps file sizes and output far below it.
MAX_HEADER = 1 << 20
MAX_BODY = 256 << 20
VERSION = 1


def encode(header: dict[str, Any], body: bytes = b"") -> bytes:
    raw = json.dumps(header, separators=(",", ":")).encode()
    return PREFIX.pack(len(raw), len(body)) + raw + body


class FrameError(ValueError):
    """The peer sent bytes that are not a frame."""


class Decoder:
    """Incremental frame decoder: feed bytes, get complete frames."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._need: tuple[int, int] | None = None

    def feed(self, data: bytes) -> list[tuple[dict[str, Any], bytes]]:
        self._buf += data
        frames = []
        while True:
            if self._need is None:
                if len(self._buf) < PREFIX.size:
                    break
                hlen, blen = PREFIX.unpack_from(self._buf)
                if hlen > MAX_HEADER or blen > MAX_BODY:
                    msg = f"frame too large: header {hlen} bytes, body {blen} bytes"
                    raise FrameError(msg)
                self._need = (hlen, blen)
                del self._buf[: PREFIX.size]
            hlen, blen = self._need
            if len(self._buf) < hlen + blen:
                break
            header = json.loads(bytes(self._buf[:hlen]))
            body = bytes(self._buf[hlen : hlen + blen])
            del self._buf[: hlen + blen]
            self._need = None
            if not isinstance(header, dict):
                msg = "frame header is not a JSON object"
                raise FrameError(msg)
            frames.append((header, body))
        return frames
