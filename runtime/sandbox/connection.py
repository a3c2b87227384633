"""The daemon's side of the agent protocol, over Docker's attach stream.

One asyncio connection per sandbox: requests carry ids, a single reader
task demultiplexes Docker's stdout/stderr framing and the agent's frames,
and resolves the waiting request. No thread per session, no Docker API
call per tool call.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from dataclasses import dataclass
from typing import Any

from runtime.agent import protocol
from runtime.errors import SandboxLost
from runtime.sandbox.backend import EventSink

log = logging.getLogger(__name__)

DOCKER_STREAM_HEADER = 8


@dataclass
class _Pending:
    future: asyncio.Future[tuple[dict[str, Any], bytes]]
    on_event: EventSink | None = None


class AgentConnection:
    def __init__(
        self,
        name: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.name = name
        self._reader = reader
        self._writer = writer
        self._decoder = protocol.Decoder()
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._hello: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None
        self.lost = ""

    def start(self) -> None:
        self._task = asyncio.create_task(self._read_loop(), name=f"agent-{self.name}")

    async def hello(self, timeout: float) -> dict[str, Any]:
        return await asyncio.wait_for(asyncio.shield(self._hello), timeout)

    def next_id(self) -> int:
        return next(self._ids)

    async def request(
        self,
        op: str,
        header: dict[str, Any],
        body: bytes = b"",
        on_event: EventSink | None = None,
        request_id: int | None = None,
    ) -> tuple[dict[str, Any], bytes]:
        if self.lost:
            raise SandboxLost(self.lost)
        rid = self.next_id() if request_id is None else request_id
        future: asyncio.Future[tuple[dict[str, Any], bytes]] = (
            asyncio.get_running_loop().create_future()
        )
        self._pending[rid] = _Pending(future, on_event)
        try:
            self._writer.write(protocol.encode({**header, "op": op, "id": rid}, body))
            if len(body) > 65536:
                await self._writer.drain()
            return await future
        finally:
            self._pending.pop(rid, None)

    async def cancel(self, request_id: int, reason: str) -> None:
        if self.lost:
            return
        cid = self.next_id()
        frame = {"op": "cancel", "id": cid, "target": request_id, "reason": reason}
        with contextlib.suppress(ConnectionError, RuntimeError):
            self._writer.write(protocol.encode(frame))

    def abort(self, reason: str) -> None:
        if not self.lost:
            self.lost = reason
        for pending in list(self._pending.values()):
            if not pending.future.done():
                pending.future.set_exception(SandboxLost(self.lost))
        if not self._hello.done():
            self._hello.set_exception(SandboxLost(self.lost))
            self._hello.exception()  # retrieved: nobody may be waiting for it

    def close(self) -> None:
        self.abort(self.lost or "session closed")
        if self._task is not None:
            self._task.cancel()
        with contextlib.suppress(Exception):
            self._writer.close()

    async def _read_loop(self) -> None:
        reason = "the sandbox's agent stopped answering (container exited or was removed)"
        try:
            while True:
                head = await self._reader.readexactly(DOCKER_STREAM_HEADER)
                size = int.from_bytes(head[4:8], "big")
                payload = await self._reader.readexactly(size)
                if head[0] == 2:
                    log.debug("agent %s stderr: %r", self.name, payload[:500])
                    continue
                for frame, body in self._decoder.feed(payload):
                    self._dispatch(frame, body)
        except asyncio.CancelledError:
            reason = self.lost or "session closed"
            raise
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except protocol.FrameError as exc:
            reason = f"the sandbox's agent broke protocol: {exc}"
        finally:
            self.abort(reason)

    def _dispatch(self, frame: dict[str, Any], body: bytes) -> None:
        if frame.get("op") == "hello":
            if not self._hello.done():
                self._hello.set_result(frame)
            return
        pending = self._pending.get(int(frame.get("id", -1)))
        if pending is None or pending.future.done():
            return  # a request given up on (cancelled) still gets its answer
        if frame.get("done"):
            pending.future.set_result((frame, body))
        elif pending.on_event is not None:
            pending.on_event(frame, body)
