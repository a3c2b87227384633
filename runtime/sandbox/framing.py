"""Request/response multiplexing with one agent over any byte stream.

One asyncio connection per sandbox: requests carry ids, a single reader
task decodes the agent's frames and resolves the waiting request. The
transport is whatever the backend has: Docker's attach stream
(docker/attach.py), a child process's pipes (local.py), or none at all
(fake.py implements FrameChannel in memory).
No thread per session, no engine API call per tool call.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from runtime.agent import protocol
from runtime.errors import SandboxLost

log = logging.getLogger(__name__)

# Called (on the event loop, in order) with each frame the agent streams
# before its final answer; it must not block.
FrameSink = Callable[[protocol.Frame], None]


class ByteSource(Protocol):
    """The agent's output: the next bytes it wrote, b"" once it is gone."""

    async def read(self) -> bytes: ...


class ByteSink(Protocol):
    """The agent's input (asyncio.StreamWriter has this shape)."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...


class FrameChannel(Protocol):
    """What the typed client needs of a connection to an agent."""

    @property
    def lost(self) -> str:
        """Why the agent is gone ("" while it answers)."""
        ...

    def next_id(self) -> int: ...

    async def request(
        self,
        message: protocol.Message,
        body: bytes = b"",
        on_event: FrameSink | None = None,
        request_id: int | None = None,
    ) -> protocol.Frame:
        """Send one request; the frame that ends it (a reply or a Failure)."""
        ...

    async def send(self, message: protocol.Message, request_id: int, body: bytes = b"") -> None:
        """Send a frame of running request `request_id` (a chunk, a credit),
        once the agent's input has room for it."""
        ...

    async def cancel(self, request_id: int, reason: str) -> None: ...

    def abort(self, reason: str, error: Exception | None = None) -> None:
        """Fail every pending request now with SANDBOX_LOST (`reason`), or `error`."""
        ...


@dataclass
class _Pending:
    future: asyncio.Future[protocol.Frame]
    on_event: FrameSink | None = None


class AgentConnection:
    """Frames to and from one agent; implements FrameChannel."""

    def __init__(
        self, name: str, source: ByteSource, sink: ByteSink, epoch: int, resync: bool = False
    ) -> None:
        self.name = name
        self._source = source
        self._sink = sink
        self._epoch = epoch
        self._decoder = protocol.Decoder()
        self._pending: dict[int, _Pending] = {}
        # Request ids start where no earlier daemon's can be: an agent that
        # outlived its daemon still runs calls of the old ids.
        self._ids = itertools.count(1 + (epoch % (1 << 40)) * (1 << 20))
        self._task: asyncio.Task[None] | None = None
        self._lost = ""
        # What later requests fail with, when not SandboxLost (DaemonStopping).
        self._error: Exception | None = None
        self._closing = False
        # Told (once, with the reason) when the agent goes away by itself:
        # the container died or was removed, not closed by the daemon.
        self.on_lost: Callable[[str], None] | None = None
        # Re-attached to a running agent: whatever arrives before its Resync
        # frame (the tail of a frame it wrote to nobody) is skipped.
        self._resynced: asyncio.Future[protocol.Frame] | None = None
        if resync:
            self._resynced = asyncio.get_running_loop().create_future()

    @property
    def lost(self) -> str:
        return self._lost

    def start(self) -> None:
        self._task = asyncio.create_task(self._read_loop(), name=f"agent-{self.name}")

    def next_id(self) -> int:
        return next(self._ids)

    async def request(
        self,
        message: protocol.Message,
        body: bytes = b"",
        on_event: FrameSink | None = None,
        request_id: int | None = None,
    ) -> protocol.Frame:
        if self._lost:
            raise self._error or SandboxLost(self._lost)
        rid = self.next_id() if request_id is None else request_id
        future: asyncio.Future[protocol.Frame] = asyncio.get_running_loop().create_future()
        self._pending[rid] = _Pending(future, on_event)
        try:
            self._sink.write(protocol.encode(message, rid, self._epoch, body))
            if len(body) > 65536:
                await self._sink.drain()
            return await future
        finally:
            self._pending.pop(rid, None)

    async def send(self, message: protocol.Message, request_id: int, body: bytes = b"") -> None:
        if self._lost:
            raise self._error or SandboxLost(self._lost)
        self._sink.write(protocol.encode(message, request_id, self._epoch, body))
        # Each writer waits for the transport's buffer to drain: what the
        # daemon holds for a transfer is its window, not the agent's backlog.
        await self._sink.drain()

    async def cancel(self, request_id: int, reason: str) -> None:
        if self._lost:
            return
        frame = protocol.encode(
            protocol.Cancel(target=request_id, reason=reason), self.next_id(), self._epoch
        )
        with contextlib.suppress(ConnectionError, RuntimeError):
            self._sink.write(frame)

    async def resynced(self, timeout: float) -> protocol.Resync:
        """The agent's Resync frame (only on a connection made with `resync`)."""
        assert self._resynced is not None
        frame = await asyncio.wait_for(asyncio.shield(self._resynced), timeout)
        return frame.as_type(protocol.Resync)

    def abort(self, reason: str, error: Exception | None = None) -> None:
        """Fail every pending request: SandboxLost(reason), or `error`."""
        if not self._lost:
            self._lost = reason
            self._error = error
        for pending in list(self._pending.values()):
            if not pending.future.done():
                pending.future.set_exception(error or SandboxLost(self._lost))
        if self._resynced is not None and not self._resynced.done():
            self._resynced.set_exception(error or SandboxLost(self._lost))
            self._resynced.exception()

    def close(self) -> None:
        self._closing = True
        self.abort(self._lost or "session closed")
        if self._task is not None:
            self._task.cancel()
        with contextlib.suppress(Exception):
            self._sink.close()

    async def _read_loop(self) -> None:
        reason = "the sandbox's agent stopped answering (container exited or was removed)"
        try:
            while True:
                data = await self._source.read()
                if not data:
                    break
                if self._resynced is not None and not self._resynced.done():
                    self._before_resync(data)
                    continue
                for frame in self._decoder.feed(data):
                    self._dispatch(frame)
        except asyncio.CancelledError:
            reason = self._lost or "session closed"
            raise
        except (ConnectionError, OSError):
            pass
        except protocol.FrameError as exc:
            reason = f"the sandbox's agent broke protocol: {exc}"
        finally:
            self.abort(reason)
            if not self._closing and self.on_lost is not None:
                self.on_lost(self._lost)

    def _before_resync(self, data: bytes) -> None:
        assert self._resynced is not None
        try:
            frames = self._decoder.feed(data)
        except protocol.FrameError:
            self._decoder.resync()  # a stale frame's tail: look for the next MAGIC
            return
        for at, frame in enumerate(frames):
            if frame.op == protocol.Resync.OP:
                self._resynced.set_result(frame)
                for later in frames[at + 1 :]:
                    self._dispatch(later)
                return

    def _dispatch(self, frame: protocol.Frame) -> None:
        if frame.epoch != self._epoch:
            log.debug("agent %s: dropped a frame of epoch %d", self.name, frame.epoch)
            return
        pending = self._pending.get(frame.request_id)
        if pending is None or pending.future.done():
            return  # a request given up on (cancelled) still gets its answer
        if frame.op in _EVENTS:
            if pending.on_event is not None:
                pending.on_event(frame)
        else:
            pending.future.set_result(frame)


_EVENTS = frozenset(event.OP for event in protocol.EVENTS)
