"""One transfer's chunks and credits, between the agent's loop and the
thread that packs or unpacks the archive (protocol.py: flow control).

Inflow (an Extract): the loop puts each ArchiveChunk the daemon sends; the
extraction thread reads them as a file and grants a Credit for each chunk
it takes, so at most `window` chunks ever wait here. Outflow (an Archive):
the packing thread spends a credit on every chunk it sends and waits for
more while the daemon has none to give; the loop adds the daemon's Credits.
Every wait checks the operation's budget, so a transfer whose peer went
quiet ends at its deadline, or at once when cancelled.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import collections
import threading
from typing import Callable, Deque, Union

from . import budget
from .files import FileOpError
from .protocol import INVALID_ARGUMENTS

# How often a waiting thread looks at its budget.
POLL_S = 0.1


class Inflow:
    """An Extract's archive as it arrives: a file the extraction thread reads."""

    def __init__(self, window: int, credit: Callable[[int], None]) -> None:
        self.window = max(1, window)
        self._credit = credit
        self._ready = threading.Condition()
        self._chunks: Deque[bytes] = collections.deque()
        self._ended = False
        self._overrun = False
        self._current = memoryview(b"")

    # -- the loop's side ---------------------------------------------------
    def put(self, data: bytes, end: bool) -> None:
        with self._ready:
            if data:
                self._chunks.append(data)
                # The daemon may have `window` chunks on their way, no more.
                self._overrun = self._overrun or len(self._chunks) > self.window
            self._ended = self._ended or end
            self._ready.notify()

    # -- the thread's side -------------------------------------------------
    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes (a chunk's worth when negative); b"" at the end."""
        if not self._current and not self._next_chunk():
            return b""
        if size < 0 or size >= len(self._current):
            data, self._current = self._current, memoryview(b"")
        else:
            data, self._current = self._current[:size], self._current[size:]
        return bytes(data)

    def peek(self, size: int) -> bytes:
        """The next `size` bytes (fewer at the end), left to be read."""
        while len(self._current) < size:
            rest = bytes(self._current)
            if not self._next_chunk():
                self._current = memoryview(rest)
                break
            self._current = memoryview(rest + bytes(self._current))
        return bytes(self._current[:size])

    def _next_chunk(self) -> bool:
        with self._ready:
            while not self._chunks:
                if self._ended:
                    return False
                budget.check("waiting for the archive's next chunk")
                self._ready.wait(POLL_S)
            if self._overrun:
                msg = f"the daemon sent more than the {self.window} chunks it had credit for"
                raise FileOpError(INVALID_ARGUMENTS, msg)
            self._current = memoryview(self._chunks.popleft())
        self._credit(1)
        return True


class Outflow:
    """An Archive's credits: chunks the daemon has room for."""

    def __init__(self, window: int) -> None:
        self._ready = threading.Condition()
        self._credits = max(1, window)

    def grant(self, chunks: int) -> None:
        """The loop's side: the daemon took `chunks` more."""
        with self._ready:
            self._credits += max(0, chunks)
            self._ready.notify()

    def spend(self) -> None:
        """The thread's side: one credit, waiting for the daemon to grant it."""
        with self._ready:
            while self._credits <= 0:
                budget.check("waiting for the daemon to take the archive's chunks")
                self._ready.wait(POLL_S)
            self._credits -= 1


Flow = Union[Inflow, Outflow]
