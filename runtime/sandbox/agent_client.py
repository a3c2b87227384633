"""The typed client of the in-sandbox agent: the only code that turns
requests into frames and agent error codes into toolrt's failures.

Every backend (Docker, local, fake) hands out an AgentClient over its
FrameChannel; tools and sessions call its methods and never see a frame.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TypeVar

from runtime.agent import protocol
from runtime.errors import (
    CallTimeout,
    EngineUnavailable,
    FileMissing,
    InternalFailure,
    InvalidArguments,
    LimitExceeded,
    PathDenied,
    ToolFailure,
)
from runtime.sandbox.framing import FrameChannel

R = TypeVar("R", bound=protocol.Message)

# Agent error codes → the failure the model sees; any other code is INTERNAL.
AGENT_FAILURES: dict[str, type[ToolFailure]] = {
    protocol.NOT_FOUND: FileMissing,
    protocol.PATH_DENIED: PathDenied,
    protocol.LIMIT_EXCEEDED: LimitExceeded,
    protocol.INVALID_ARGUMENTS: InvalidArguments,
    protocol.TIMEOUT: CallTimeout,
}
# How much longer than an operation's own deadline the daemon waits for its
# answer before it stops believing one will come.
ANSWER_MARGIN_S = 10.0
# Uploads and downloads move whole workspaces: they get longer than a tool call.
TRANSFER_SECONDS = 300.0


def failure_of(failure: protocol.Failure) -> ToolFailure:
    cls = AGENT_FAILURES.get(failure.code, InternalFailure)
    return cls(failure.message or "the sandbox reported an error")


class AgentClient:
    def __init__(self, channel: FrameChannel) -> None:
        self.channel = channel

    @property
    def lost(self) -> str:
        return self.channel.lost

    async def _call(
        self,
        message: protocol.Message,
        reply_type: type[R],
        body: bytes = b"",
        on_event: Callable[[protocol.Frame], None] | None = None,
        within_s: float = protocol.FILE_OP_SECONDS + ANSWER_MARGIN_S,
    ) -> tuple[R, bytes]:
        """One request; its typed reply and body, or the failure it ended in.

        No answer within `within_s` is a TIMEOUT: a stuck agent never holds
        a call (and the session's write lock) forever. If the caller goes
        away mid-request, or the time runs out, the agent is told to kill
        what the request started.
        """
        request_id = self.channel.next_id()
        try:
            frame = await asyncio.wait_for(
                self.channel.request(message, body, on_event, request_id), within_s
            )
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await self.channel.cancel(request_id, "cancelled")
            raise
        except TimeoutError as exc:
            with contextlib.suppress(Exception):
                await self.channel.cancel(request_id, "deadline")
            msg = f"the sandbox's agent did not answer {message.OP!r} within {within_s:g} s"
            raise CallTimeout(msg) from exc
        except protocol.FrameError as exc:
            # Raised while encoding, before anything was sent: the arguments
            # (a path, a command, environment variables) are too large to carry.
            msg = (
                f"the request is too large for the sandbox's agent ({exc}): paths, commands "
                f"and environment variables travel in a header of at most {protocol.MAX_HEADER} "
                "bytes; send shorter ones"
            )
            raise InvalidArguments(msg) from exc
        try:
            if frame.op == protocol.Failure.OP:
                raise failure_of(frame.as_type(protocol.Failure))
            return frame.as_type(reply_type), frame.body
        except protocol.FrameError as exc:
            msg = f"the sandbox's agent answered {message.OP!r} with a malformed frame: {exc}"
            raise InternalFailure(msg) from exc

    # -- session ------------------------------------------------------------
    async def hello(self, timeout: float) -> protocol.HelloReply:
        """The attach handshake; refuses an agent of another protocol version."""
        reply, _ = await self._call(protocol.Hello(), protocol.HelloReply, within_s=timeout)
        if reply.version != protocol.VERSION:
            msg = (
                f"the sandbox's agent speaks protocol version {reply.version}; this daemon "
                f"speaks {protocol.VERSION}"
            )
            raise EngineUnavailable(msg)
        return reply

    async def ping(self) -> None:
        await self._call(protocol.Ping(), protocol.Pong)

    # -- commands -----------------------------------------------------------
    async def exec(
        self,
        request: protocol.Exec,
        stdin: bytes = b"",
        on_output: Callable[[str, bytes], None] | None = None,
    ) -> tuple[protocol.ExecResult, bytes]:
        """Run a command; `on_output(stream, chunk)` sees streamed output."""
        on_event = None
        if on_output is not None:
            sink = on_output

            def on_event(frame: protocol.Frame) -> None:
                if frame.op == protocol.Output.OP:
                    sink(frame.as_type(protocol.Output).stream, frame.body)

        runs_for = request.settle_s if request.background else request.timeout_s
        within = runs_for + request.grace_s + ANSWER_MARGIN_S
        return await self._call(request, protocol.ExecResult, stdin, on_event, within)

    async def process_list(self) -> list[protocol.ProcessInfo]:
        reply, _ = await self._call(protocol.ProcessList(), protocol.ProcessListReply)
        return reply.processes

    async def process_output(self, process_id: str) -> tuple[protocol.ProcessReply, bytes]:
        return await self._call(
            protocol.ProcessOutput(process_id=process_id), protocol.ProcessReply
        )

    async def process_kill(self, process_id: str) -> protocol.ProcessReply:
        reply, _ = await self._call(
            protocol.ProcessKill(process_id=process_id), protocol.ProcessReply
        )
        return reply

    # -- files --------------------------------------------------------------
    async def resolve(self, paths: list[str]) -> list[protocol.ResolvedPath]:
        reply, _ = await self._call(protocol.Resolve(paths=paths), protocol.Resolved)
        if len(reply.resolved) != len(paths):
            msg = f"the sandbox's agent resolved {len(reply.resolved)} of {len(paths)} paths"
            raise InternalFailure(msg)
        return reply.resolved

    async def read(self, request: protocol.Read) -> tuple[protocol.ReadReply, bytes]:
        within = request.deadline_s + ANSWER_MARGIN_S
        return await self._call(request, protocol.ReadReply, within_s=within)

    async def write(self, path: str, data: bytes) -> protocol.WriteReply:
        reply, _ = await self._call(protocol.Write(path=path), protocol.WriteReply, data)
        return reply

    async def unlink(self, path: str) -> None:
        await self._call(protocol.Unlink(path=path), protocol.Done)

    async def list_dir(
        self,
        path: str,
        recursive: bool,
        max_entries: int,
        deadline_s: float = protocol.FILE_OP_SECONDS,
    ) -> protocol.Listing:
        request = protocol.ListDir(
            path=path, recursive=recursive, max_entries=max_entries, deadline_s=deadline_s
        )
        within = deadline_s + ANSWER_MARGIN_S
        reply, _ = await self._call(request, protocol.Listing, within_s=within)
        return reply

    async def extract(
        self, dest: str, archive: bytes, deadline_s: float = TRANSFER_SECONDS
    ) -> protocol.Transferred:
        request = protocol.Extract(dest=dest, deadline_s=deadline_s)
        within = deadline_s + ANSWER_MARGIN_S
        reply, _ = await self._call(request, protocol.Transferred, archive, within_s=within)
        return reply

    async def archive(
        self,
        paths: list[str],
        max_bytes: int,
        on_chunk: Callable[[bytes], None],
        deadline_s: float = TRANSFER_SECONDS,
    ) -> protocol.Transferred:
        """Tar `paths`; each chunk of the archive goes to `on_chunk` as it comes."""

        def on_event(frame: protocol.Frame) -> None:
            if frame.op == protocol.ArchiveChunk.OP:
                on_chunk(frame.body)

        request = protocol.Archive(paths=paths, max_bytes=max_bytes, deadline_s=deadline_s)
        within = deadline_s + ANSWER_MARGIN_S
        reply, _ = await self._call(
            request, protocol.Transferred, on_event=on_event, within_s=within
        )
        return reply
