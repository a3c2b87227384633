"""The typed client of the in-sandbox agent: the only code that turns
requests into frames and agent error codes into toolrt's failures.

Every backend (Docker, local, fake) hands out an AgentClient over its
FrameChannel; tools and sessions call its methods and never see a frame.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable
from typing import TypeVar

from runtime.agent import protocol, records
from runtime.agent.redact import encode_secrets
from runtime.errors import (
    CallTimeout,
    EngineUnavailable,
    FileMissing,
    InternalFailure,
    InvalidArguments,
    LimitExceeded,
    OutcomeUnknown,
    PathDenied,
    ProgramError,
    ToolFailure,
)
from runtime.queued import queued_until_done
from runtime.sandbox.framing import FrameChannel

R = TypeVar("R", bound=protocol.Message)

# Agent error codes → the failure the model sees; any other code is INTERNAL.
AGENT_FAILURES: dict[str, type[ToolFailure]] = {
    protocol.NOT_FOUND: FileMissing,
    protocol.PATH_DENIED: PathDenied,
    protocol.LIMIT_EXCEEDED: LimitExceeded,
    protocol.INVALID_ARGUMENTS: InvalidArguments,
    protocol.TIMEOUT: CallTimeout,
    protocol.OUTCOME_UNKNOWN: OutcomeUnknown,
}
# How much longer than an operation's own deadline the daemon waits for its
# answer before it stops believing one will come.
ANSWER_MARGIN_S = 10.0
# Uploads and downloads move whole workspaces: they get longer than a tool call.
TRANSFER_SECONDS = 300.0
# The egress relay binds a port on a thread of the agent's: quick or broken.
RELAY_START_SECONDS = 10.0

# Sends the frames that follow a request (an upload's chunks), given its id.
Feed = Callable[[int], Awaitable[None]]


def failure_of(failure: protocol.Failure) -> ToolFailure:
    cls = AGENT_FAILURES.get(failure.code, InternalFailure)
    return cls(failure.message or "the sandbox reported an error")


def program_failure_of(failure: protocol.Failure) -> Exception:
    """A program operation's Failure: its code is the reason its client sees."""
    if failure.code in ProgramError.STATUSES:
        return ProgramError(failure.message or "the sandbox refused", failure.code)
    if failure.code == protocol.LIMIT_EXCEEDED:
        return ProgramError(failure.message, "QUOTA_EXCEEDED")
    return failure_of(failure)


class _Window:
    """Chunks the agent has room for: one spent per chunk sent, granted back
    by its Credit frames as it takes them in."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._room = size
        self._granted = asyncio.Event()

    def grant(self, chunks: int) -> None:
        self._room += max(0, chunks)
        self._granted.set()

    async def spend(self) -> None:
        while self._room <= 0:
            self._granted.clear()
            await self._granted.wait()
        self._room -= 1


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
        feed: Feed | None = None,
        request_id: int | None = None,
        failures: Callable[[protocol.Failure], Exception] = failure_of,
    ) -> tuple[R, bytes]:
        """One request; its typed reply and body, or the failure it ended in
        (`failures` makes the agent's Failure an exception).

        No answer within `within_s` is a TIMEOUT: a stuck agent never holds
        a call (and the session's write lock) forever. If the caller goes
        away mid-request, or the time runs out, the agent is told to kill
        what the request started. `feed` sends the frames that follow the
        request until it is answered.
        """
        if request_id is None:
            request_id = self.channel.next_id()
        try:
            # A timeout scope, not wait_for: no task of its own per request.
            async with asyncio.timeout(within_s):
                frame = await self._exchange(message, body, on_event, request_id, feed)
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
                raise failures(frame.as_type(protocol.Failure))
            return frame.as_type(reply_type), frame.body
        except protocol.FrameError as exc:
            msg = f"the sandbox's agent answered {message.OP!r} with a malformed frame: {exc}"
            raise InternalFailure(msg) from exc

    async def _exchange(
        self,
        message: protocol.Message,
        body: bytes,
        on_event: Callable[[protocol.Frame], None] | None,
        request_id: int,
        feed: Feed | None,
    ) -> protocol.Frame:
        answer = self.channel.request(message, body, on_event, request_id)
        if feed is None:
            return await answer
        # Scheduled first, so the request is written before the feed's frames.
        answered = asyncio.ensure_future(answer)
        feeding = asyncio.ensure_future(feed(request_id))
        try:
            await asyncio.wait({answered, feeding}, return_when=asyncio.FIRST_COMPLETED)
            if answered.done():
                # Possibly before the feed ended (a refusal): the rest is not needed.
                return answered.result()
            if feeding.exception() is not None:
                with contextlib.suppress(Exception):
                    await self.channel.cancel(request_id, "cancelled")
                feeding.result()
            return await answered
        finally:
            for task in (feeding, answered):
                task.cancel()
            await asyncio.gather(feeding, answered, return_exceptions=True)

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

    async def ack(self, call_ids: list[str]) -> None:
        """Tell the agent these calls' results are stored (it may drop them).
        Best effort: an unacknowledged result is only kept a little longer."""
        if self.channel.lost:
            return
        with contextlib.suppress(Exception):
            await self.channel.send(protocol.Ack(call_ids=call_ids), self.channel.next_id())

    async def ping(self) -> None:
        await self._call(protocol.Ping(), protocol.Pong)

    async def set_secrets(self, secrets: dict[str, str]) -> None:
        """Give the session its secrets (values in the body, never a header)."""
        await self._call(protocol.Secrets(), protocol.Done, encode_secrets(secrets))

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

    async def process_input(self, process_id: str, data: bytes) -> int:
        """Type `data` into a background process's terminal; the bytes it took."""
        reply, _ = await self._call(
            protocol.ProcessInput(process_id=process_id), protocol.InputWritten, data
        )
        return reply.written

    async def process_kill(self, process_id: str) -> protocol.ProcessReply:
        reply, _ = await self._call(
            protocol.ProcessKill(process_id=process_id), protocol.ProcessReply
        )
        return reply

    async def stop_leftovers(self) -> int:
        """Stop what commands left running (not the background processes);
        how many processes."""
        reply, _ = await self._call(protocol.StopLeftovers(), protocol.LeftoversStopped)
        return reply.processes

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

    async def read_resolved(
        self, request: protocol.Read, check: Callable[[str], None]
    ) -> tuple[protocol.ReadReply, bytes]:
        """Resolve `request.path` in the sandbox and read what it resolves to,
        in one trip; `check(resolved)` raises if that path may not be shown.

        It runs before any failure of the read is raised: a path the session
        may not read is denied whatever its state (missing, a directory).
        """
        request = records.replace(request, resolve=True)
        reply, body = await self.read(request)
        check(reply.path)
        if reply.failure is not None:
            raise failure_of(reply.failure)
        return reply, body

    async def write(
        self,
        path: str,
        data: bytes,
        call_id: str = "",
        resume: bool = False,
        exact: bool = False,
    ) -> protocol.WriteReply:
        """Replace `path` with `data`; with a `call_id` the agent keeps the
        answer until an Ack, and `resume` gets that answer instead of writing
        again (write_file's exactly-once without a start record). `exact`:
        `path` was checked as asked, not resolved; the agent writes it only
        if no symbolic link is on it, else writes nothing and the reply says
        `resolve_first`."""
        request = protocol.Write(path=path, call_id=call_id, resume=resume, exact=exact)
        reply, _ = await self._call(request, protocol.WriteReply, data)
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
        self,
        dest: str,
        chunks: AsyncIterable[bytes],
        deadline_s: float = TRANSFER_SECONDS,
        restore: bool = False,
    ) -> protocol.Transferred:
        """Unpack the tar archive `chunks` make up below `dest`, all or nothing
        (streamed as `send_chunks` does)."""
        request = protocol.Extract(
            dest=dest, deadline_s=deadline_s, window=protocol.WINDOW_CHUNKS, restore=restore
        )
        return await self.send_chunks(request, chunks)

    async def send_chunks(
        self,
        request: protocol.Extract | protocol.WritePath,
        chunks: AsyncIterable[bytes],
        failures: Callable[[protocol.Failure], Exception] = failure_of,
    ) -> protocol.Transferred:
        """A request whose data (`chunks`) follows it as ArchiveChunks.

        The data goes out as it comes, in frames of at most CHUNK_BYTES,
        never more than a window ahead of the agent's credits: the daemon
        holds a chunk at a time whatever the size. The agent may answer
        before the data ends (a refusal); the rest is then never read.
        """
        window = _Window(request.window)

        def on_event(frame: protocol.Frame) -> None:
            if frame.op == protocol.Credit.OP:
                window.grant(frame.as_type(protocol.Credit).chunks)

        async def feed(request_id: int) -> None:
            async for data in chunks:
                for start in range(0, len(data), protocol.CHUNK_BYTES):
                    await window.spend()
                    piece = data[start : start + protocol.CHUNK_BYTES]
                    await self.channel.send(protocol.ArchiveChunk(), request_id, piece)
            await self.channel.send(protocol.ArchiveChunk(end=True), request_id)

        within = request.deadline_s + ANSWER_MARGIN_S
        reply, _ = await self._call(
            request,
            protocol.Transferred,
            on_event=on_event,
            within_s=within,
            feed=feed,
            failures=failures,
        )
        return reply

    def archive(
        self,
        paths: list[str],
        max_bytes: int,
        deadline_s: float = TRANSFER_SECONDS,
        redact: bool = True,
    ) -> AsyncGenerator[bytes, None]:
        """Tar `paths`: the archive's chunks, as the caller takes them
        (`receive_chunks`)."""
        request = protocol.Archive(
            paths=paths,
            max_bytes=max_bytes,
            deadline_s=deadline_s,
            window=protocol.WINDOW_CHUNKS,
            redact=redact,
        )
        return self.receive_chunks(request)

    async def receive_chunks(
        self,
        request: protocol.Archive | protocol.ReadPath,
        failures: Callable[[protocol.Failure], Exception] = failure_of,
    ) -> AsyncGenerator[bytes, None]:
        """A request answered by ArchiveChunks: each, as the caller takes them.

        The agent sends a window of chunks ahead, then one more for each
        credit, and a credit goes back only when the caller asks for the
        next chunk: a slow reader holds the agent back, and what waits here
        is at most a window, whatever the size.
        """
        window = request.window
        arrived: asyncio.Queue[bytes] = asyncio.Queue()

        def on_event(frame: protocol.Frame) -> None:
            if frame.op != protocol.ArchiveChunk.OP:
                return
            if arrived.qsize() >= window:
                msg = f"the agent sent more than the {window} chunks it had credit for"
                raise protocol.FrameError(msg)
            arrived.put_nowait(frame.body)

        request_id = self.channel.next_id()
        call = asyncio.ensure_future(
            self._call(
                request,
                protocol.Transferred,
                on_event=on_event,
                within_s=request.deadline_s + ANSWER_MARGIN_S,
                request_id=request_id,
                failures=failures,
            )
        )

        async def taken(chunk: bytes) -> None:
            # The caller asks for more: the agent may send one more.
            await self.channel.send(protocol.Credit(chunks=1), request_id)

        try:
            async for chunk in queued_until_done(call, arrived, taken):
                yield chunk
            call.result()
        finally:
            if not call.done():
                call.cancel()
                with contextlib.suppress(BaseException):
                    await call

    # -- programs (spawn.go and progfiles.go in static-agent/) --------------
    async def stat(self, request: protocol.Stat) -> protocol.StatReply:
        reply, _ = await self._call(request, protocol.StatReply, failures=program_failure_of)
        return reply

    def read_path(self, request: protocol.ReadPath) -> AsyncGenerator[bytes, None]:
        """A file's bytes, as the caller takes them; FILE_TOO_LARGE past max_bytes."""
        return self.receive_chunks(request, program_failure_of)

    async def write_path(
        self, request: protocol.WritePath, chunks: AsyncIterable[bytes]
    ) -> protocol.Transferred:
        return await self.send_chunks(request, chunks, program_failure_of)

    async def spawn(
        self,
        request: protocol.Spawn,
        argv: list[str],
        inputs: AsyncIterable[tuple[protocol.ProgramInput, bytes]],
    ) -> AsyncGenerator[tuple[protocol.Message, bytes], None]:
        """Run a program: its Spawned event, its Output events (with their
        chunks) as the caller takes them, and last its SpawnExit.

        `inputs` (stdin bytes, signals) go to it as they come, stdin within
        the agent's credits. Output comes within the daemon's: a credit goes
        back as the caller takes each event, so a slow reader holds the
        program back and what waits here is a window of events. Closing
        this early (the caller cancelled) kills the program's whole tree.
        """
        window = _Window(request.window)
        arrived: asyncio.Queue[tuple[protocol.Message, bytes]] = asyncio.Queue()

        def on_frame(frame: protocol.Frame) -> None:
            if frame.op == protocol.Credit.OP:
                window.grant(frame.as_type(protocol.Credit).chunks)
            elif frame.op == protocol.Spawned.OP:
                arrived.put_nowait((frame.as_type(protocol.Spawned), b""))
            elif frame.op == protocol.Output.OP:
                arrived.put_nowait((frame.as_type(protocol.Output), frame.body))

        async def feed(request_id: int) -> None:
            async for message, data in inputs:
                if not isinstance(message, protocol.Stdin):  # a signal, a resize
                    await self.channel.send(message, request_id)
                    continue
                pieces = [
                    data[start : start + protocol.CHUNK_BYTES]
                    for start in range(0, len(data), protocol.CHUNK_BYTES)
                ]
                for at, piece in enumerate(pieces):
                    await window.spend()
                    eof = message.eof and at == len(pieces) - 1
                    await self.channel.send(protocol.Stdin(eof=eof), request_id, piece)
                if message.eof and not pieces:
                    await self.channel.send(protocol.Stdin(eof=True), request_id)

        request_id = self.channel.next_id()
        body = b"".join(arg.encode("utf-8", "surrogateescape") + b"\0" for arg in argv)
        call = asyncio.ensure_future(
            self._call(
                request,
                protocol.SpawnExit,
                body,
                on_event=on_frame,
                within_s=request.timeout_s + request.grace_s + ANSWER_MARGIN_S,
                feed=feed,
                request_id=request_id,
                failures=program_failure_of,
            )
        )

        async def taken(event: tuple[protocol.Message, bytes]) -> None:
            if isinstance(event[0], protocol.Output):
                await self.channel.send(protocol.Credit(chunks=1), request_id)

        try:
            async for event in queued_until_done(call, arrived, taken):
                yield event
            reply, _ = call.result()
            yield reply, b""
        finally:
            if not call.done():
                call.cancel()
                with contextlib.suppress(BaseException):
                    await call

    # -- network ------------------------------------------------------------
    async def relay_start(self) -> protocol.RelayReady:
        """Relay 127.0.0.1:3128 in the sandbox to the session's egress proxy."""
        reply, _ = await self._call(
            protocol.RelayStart(), protocol.RelayReady, within_s=RELAY_START_SECONDS
        )
        return reply
