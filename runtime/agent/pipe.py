"""Two asyncio connections joined back to back: what one side sends, the other receives.

The daemon's egress proxy (runtime/egress/proxy.py) ends in this (the
sandbox's end, static-agent/relay.go, joins its two sides in Go). Bytes pass from one transport
to the other in the protocol callbacks, without the copies of
StreamReader (its buffer costs two per chunk), and flow control pauses a
side's reading while the other side's write buffer is full.

A Joint takes over two connections opened as streams (their protocols are
swapped; bytes their readers already hold are passed on first). The
upstream side ending ends the joint; the client side ending its sending
half-closes the upstream side, whose answer still comes. An optional
budget decides how many bytes of each chunk may pass (a cap), and the
joint ends when a side was silent for `idle_s` both ways.

Stdlib only.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Optional, Tuple, cast

# (bytes arriving, from the upstream?) → how many of them may pass.
Budget = Callable[[int, bool], int]
Stream = Tuple[asyncio.StreamReader, asyncio.StreamWriter]

# Why a joint ended.
CLOSED = "closed"
IDLE = "idle"
LIMIT = "limit"


def _buffered(reader: asyncio.StreamReader) -> bytes:
    """What `reader` holds but nobody read (asyncio keeps it in `_buffer`
    since 3.4; there is no public way to take it without waiting)."""
    buffer: bytearray = getattr(reader, "_buffer")  # noqa: B009 - private, see above
    data = bytes(buffer)
    buffer.clear()
    return data


class _Side(asyncio.Protocol):
    """One connection of a joint: reads from it go to the other side."""

    def __init__(self, joint: Joint, transport: asyncio.Transport, upstream: bool) -> None:
        self.joint = joint
        self.transport = transport
        self.upstream = upstream
        self.bytes = 0

    def data_received(self, data: bytes) -> None:
        self.joint.forward(self, data)

    def eof_received(self) -> bool:
        return self.joint.ended_sending(self)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.joint.lost(self)

    # The transport this side writes to is full: stop reading the other one.
    def pause_writing(self) -> None:
        self.joint.peer(self).transport.pause_reading()

    def resume_writing(self) -> None:
        self.joint.peer(self).transport.resume_reading()


class Joint:
    def __init__(self, client: Stream, upstream: Stream, budget: Optional[Budget] = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._readers = {False: client[0], True: upstream[0]}
        self.client = _Side(self, cast(asyncio.Transport, client[1].transport), upstream=False)
        self.upstream = _Side(self, cast(asyncio.Transport, upstream[1].transport), upstream=True)
        self._budget = budget
        self._done: asyncio.Future[None] = self._loop.create_future()
        self.reason = CLOSED
        self.last = self._loop.time()

    def peer(self, side: _Side) -> _Side:
        return self.upstream if side is self.client else self.client

    async def run(self, idle_s: float = 0.0) -> str:
        """Join the two sides until one ends; why it ended (CLOSED, IDLE, LIMIT)."""
        sides = (self.client, self.upstream)
        for side in sides:
            side.transport.set_protocol(side)
        for side in sides:
            reader = self._readers[side.upstream]
            pending = _buffered(reader)
            if pending:
                self.forward(side, pending)
            if reader.at_eof():
                self.ended_sending(side)
        for side in sides:
            _, high = side.transport.get_write_buffer_limits()
            if side.transport.get_write_buffer_size() > high:
                side.pause_writing()
            elif not side.transport.is_closing() and not side.transport.is_reading():
                side.transport.resume_reading()
        try:
            while not self._done.done():
                if not idle_s:
                    await self._done
                    break
                quiet = self._loop.time() - self.last
                if quiet >= idle_s:
                    self._end(IDLE)
                    break
                try:
                    await asyncio.wait_for(asyncio.shield(self._done), idle_s - quiet)
                except asyncio.TimeoutError:
                    pass
        finally:
            self._end(self.reason)
        return self.reason

    def forward(self, side: _Side, data: bytes) -> None:
        if self._done.done():
            return
        size = len(data)
        allowed = (
            size if self._budget is None else max(0, min(size, self._budget(size, side.upstream)))
        )
        if allowed:
            side.bytes += allowed
            self.last = self._loop.time()
            self.peer(side).transport.write(data if allowed == size else data[:allowed])
        if allowed < size:
            self._end(LIMIT)

    def ended_sending(self, side: _Side) -> bool:
        """EOF from `side`: the upstream's ends the joint, the client's is
        passed on as a half-close. True keeps the transport open."""
        if side.upstream:
            self._end(CLOSED)
            return False
        if self.upstream.transport.can_write_eof() and not self.upstream.transport.is_closing():
            self.upstream.transport.write_eof()
        return True

    def lost(self, side: _Side) -> None:
        self._end(CLOSED)

    def _end(self, reason: str) -> None:
        if self._done.done():
            return
        self.reason = reason
        self._done.set_result(None)
        # close() sends what is buffered first; the side that failed is gone anyway.
        self.client.transport.close()
        self.upstream.transport.close()
