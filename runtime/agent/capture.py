"""The head and the tail of one output stream, within a byte cap.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

from . import protocol

READ_CHUNK = 65536


class Capture:
    """Keeps the head and the tail of a stream within a byte cap."""

    def __init__(self, cap: int, head_fraction: float) -> None:
        self.head_cap = max(0, int(cap * head_fraction))
        self.tail_cap = max(0, cap - self.head_cap)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.dropped_lines = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        # Trim lazily so a flood of small reads stays linear.
        if len(self.tail) > 2 * self.tail_cap + READ_CHUNK:
            self._trim()

    def _trim(self) -> None:
        excess = len(self.tail) - self.tail_cap
        if excess > 0:
            self.dropped_lines += self.tail.count(b"\n", 0, excess)
            del self.tail[:excess]

    def finish(self) -> protocol.CaptureInfo:
        self._trim()
        return protocol.CaptureInfo(
            head=len(self.head),
            tail=len(self.tail),
            total=self.total,
            dropped_lines=self.dropped_lines,
        )
