"""The fake backend: sandboxes in memory, with scripted commands.

For tests of the pure orchestration paths above the sandbox (batches, the
journal, errors, dialects): no process, no engine. Each sandbox's
FakeChannel answers the typed requests the real AgentClient sends — every
request and reply crosses a real frame encode/decode — from a small
in-memory file tree (resolve, read, write, list, unlink, extract, archive:
plain files and directories only, no symlinks), and answers `exec` with the
backend's script:

    backend.script(lambda req: (protocol.ExecResult(exit_code=0), b"out"))

A script may return (result, stdout) or (result, stdout, stderr), an agent
`protocol.Failure`, or `Lose(reason)` to make the sandbox vanish; it may be
a coroutine function, and `delay` holds every answer that long, so tests
can see calls overlap or wait. `requests` records what every sandbox was
asked, in order. Never a stand-in for the engine in tests about sandboxing.
"""

from __future__ import annotations

import asyncio
import inspect
import io
import itertools
import posixpath
import tarfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from runtime.agent import protocol, records
from runtime.constants import TMP, WORKSPACE
from runtime.errors import SandboxLost
from runtime.sandbox.backend import Adopted, ConnectedSandbox, SandboxBackend, SandboxSpec
from runtime.sandbox.framing import FrameSink

EPOCH = 1


@dataclass
class Lose:
    """A script's answer that makes the sandbox vanish mid-call."""

    reason: str = "the fake sandbox was lost"


ExecAnswer = (
    tuple[protocol.ExecResult, bytes]
    | tuple[protocol.ExecResult, bytes, bytes]
    | protocol.Failure
    | Lose
)
ExecScript = Callable[[protocol.Exec], ExecAnswer | Awaitable[ExecAnswer]]
Answer = tuple[protocol.Message, bytes]


def exit_zero(request: protocol.Exec) -> ExecAnswer:
    return protocol.ExecResult(exit_code=0), b""


def frame_of(message: protocol.Message, request_id: int, body: bytes = b"") -> protocol.Frame:
    """`message` through a real encode and decode, as over a pipe."""
    [frame] = protocol.Decoder().feed(protocol.encode(message, request_id, EPOCH, body))
    return frame


class Refused(Exception):
    """An operation's failure, answered as the agent's Failure frame."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.failure = protocol.Failure(code=code, message=message)


class FakeChannel:
    """One fake agent: a FrameChannel over an in-memory file tree."""

    def __init__(self, name: str, backend: FakeBackend) -> None:
        self.name = name
        self.files: dict[str, bytes] = {}
        self.dirs = {"/", WORKSPACE, TMP}
        self._backend = backend
        self._ids = itertools.count(1)
        self._running: dict[int, asyncio.Task[protocol.Frame]] = {}
        # Frames the daemon sends to running requests (an upload's chunks).
        self._inbox: dict[int, asyncio.Queue[tuple[protocol.Message, bytes]]] = {}
        self._lost = ""
        self._error: Exception | None = None
        self._detached: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        # Answers of commands by call id, as the real agent keeps them.
        self.kept: dict[str, Answer] = {}

    @property
    def lost(self) -> str:
        return self._lost

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
        self._inbox[rid] = asyncio.Queue()
        task = asyncio.create_task(self._answer(frame_of(message, rid, body), on_event))
        self._running[rid] = task
        try:
            # A daemon that detaches (abort with an error) leaves the command
            # running, as a real agent does; its request ends with the error.
            either: set[asyncio.Future[Any]] = {task, self._detached}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                raise self._error or SandboxLost(self._lost)
            return task.result()
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._lost and not (current is not None and current.cancelling()):
                raise SandboxLost(self._lost) from None
            task.cancel()  # the caller gave up: so does the command
            raise
        finally:
            self._running.pop(rid, None)
            self._inbox.pop(rid, None)

    async def send(self, message: protocol.Message, request_id: int, body: bytes = b"") -> None:
        if self._lost:
            raise SandboxLost(self._lost)
        inbox = self._inbox.get(request_id)
        if inbox is not None:
            inbox.put_nowait((message, body))

    async def cancel(self, request_id: int, reason: str) -> None:
        task = self._running.get(request_id)
        if task is not None:
            task.cancel()

    def abort(self, reason: str, error: Exception | None = None) -> None:
        self._lost = self._lost or reason
        self._error = error
        if error is not None:
            if not self._detached.done():
                self._detached.set_result(None)
            return
        for task in self._running.values():
            if task is not asyncio.current_task():
                task.cancel()

    def close(self) -> None:
        self.abort("session closed")

    async def _answer(self, frame: protocol.Frame, on_event: FrameSink | None) -> protocol.Frame:
        request = frame.message()
        self._backend.requests.append((self.name, request))
        try:
            if isinstance(request, protocol.Exec):
                reply, body = await self._exec(request, frame.request_id, on_event)
            elif isinstance(request, protocol.Extract):
                archive = await self._upload(frame.request_id, on_event)
                reply, body = self._extract(request.dest, archive), b""
            else:
                reply, body = self._files(request, frame.body, frame.request_id, on_event)
        except Refused as exc:
            reply, body = exc.failure, b""
        return frame_of(reply, frame.request_id, body)

    def reattach(self) -> None:
        """A new daemon's connection to this agent (FakeBackend.adopt)."""
        self._lost, self._error = "", None
        self._detached = asyncio.get_running_loop().create_future()

    async def _exec(self, request: protocol.Exec, rid: int, on_event: FrameSink | None) -> Answer:
        if request.resume and request.call_id in self.kept:
            return self.kept[request.call_id]
        answer = await self._run_exec(request, rid, on_event)
        if request.call_id:
            self.kept[request.call_id] = answer
        return answer

    def _write(self, request: protocol.Write, body: bytes) -> Answer:
        """A write's answer kept by call id, as the static agent keeps it."""
        if request.resume and request.call_id in self.kept:
            return self.kept[request.call_id]
        self._put(request.path, body)
        answer: Answer = (protocol.WriteReply(bytes_written=len(body)), b"")
        if request.call_id:
            self.kept[request.call_id] = answer
        return answer

    async def _run_exec(
        self, request: protocol.Exec, rid: int, on_event: FrameSink | None
    ) -> Answer:
        if self._backend.delay:
            await asyncio.sleep(self._backend.delay)
        answer = self._backend.exec_script(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, Lose):
            self.abort(answer.reason)
            raise SandboxLost(answer.reason)
        if isinstance(answer, protocol.Failure):
            return answer, b""
        result, out, err = (*answer, b"")[:3]
        result.call_id = request.call_id
        result.stdout = protocol.CaptureInfo(head=len(out), total=len(out))
        result.stderr = protocol.CaptureInfo(head=len(err), total=len(err))
        for stream, chunk in (("stdout", out), ("stderr", err)):
            if request.stream and on_event is not None and chunk:
                on_event(frame_of(protocol.Output(stream=stream), rid, chunk))
        return result, out + err

    # -- the file tree --------------------------------------------------------
    def _kind(self, path: str) -> str:
        return "dir" if path in self.dirs else "file" if path in self.files else ""

    def _file(self, path: str) -> bytes:
        if path in self.dirs:
            raise Refused(protocol.INVALID_ARGUMENTS, f"{path}: is a directory")
        if path not in self.files:
            raise Refused(protocol.NOT_FOUND, f"{path}: no such file or directory")
        return self.files[path]

    def _mkdirs(self, path: str) -> None:
        while path not in self.dirs:
            self.dirs.add(path)
            path = posixpath.dirname(path)

    def _put(self, path: str, data: bytes) -> None:
        self._mkdirs(posixpath.dirname(path))
        self.files[path] = data

    def _below(self, top: str, recursive: bool) -> list[str]:
        prefix = top.rstrip("/") + "/"
        found = [p for p in self.dirs | set(self.files) if p.startswith(prefix) and p != top]
        return sorted(p for p in found if recursive or "/" not in p[len(prefix) :])

    def _read(self, request: protocol.Read) -> tuple[protocol.ReadReply, bytes]:
        data = self._file(request.path)
        if request.raw:
            return protocol.ReadReply(size=len(data)), data
        lines = data.splitlines(keepends=True)
        end = request.offset - 1 + request.limit
        window = b"".join(lines[request.offset - 1 : end])
        reply = protocol.ReadReply(
            size=len(data), total_lines=len(lines), truncated=end < len(lines)
        )
        return reply, window

    def _files(
        self, request: protocol.Message, body: bytes, rid: int, on_event: FrameSink | None
    ) -> Answer:
        if isinstance(request, protocol.Hello):
            return protocol.HelloReply(pid=1, unacked=list(self.kept)), b""
        if isinstance(request, protocol.Ping):
            return protocol.Pong(), b""
        if isinstance(request, protocol.Secrets):
            return protocol.Done(), b""
        if isinstance(request, protocol.RelayStart):
            return protocol.RelayReady(port=request.port), b""
        if isinstance(request, protocol.Resolve):
            paths = [posixpath.normpath(p) for p in request.paths]
            return protocol.Resolved(
                resolved=[protocol.ResolvedPath(path=p, type=self._kind(p)) for p in paths]
            ), b""
        if isinstance(request, protocol.Read) and request.resolve:
            path = posixpath.normpath(request.path)
            try:
                reply, data = self._read(records.replace(request, path=path, resolve=False))
            except Refused as refused:
                return protocol.ReadReply(path=path, failure=refused.failure), b""
            reply.path = path
            return reply, data
        if isinstance(request, protocol.Read):
            return self._read(request)
        if isinstance(request, protocol.Write):
            return self._write(request, body)
        if isinstance(request, protocol.Unlink):
            self.files.pop(request.path, None)
            return protocol.Done(), b""
        if isinstance(request, protocol.ListDir):
            if self._kind(request.path) != "dir":
                raise Refused(protocol.NOT_FOUND, f"{request.path}: no such directory")
            entries = [
                protocol.DirEntry(path=p, type=self._kind(p), size=len(self.files.get(p, b"")))
                for p in self._below(request.path, request.recursive)
            ]
            return protocol.Listing(entries=entries), b""
        if isinstance(request, protocol.Archive):
            return self._archive(request.paths, rid, on_event), b""
        raise Refused(protocol.INTERNAL, f"the fake sandbox has no {request.OP!r} operation")

    async def _upload(self, rid: int, on_event: FrameSink | None) -> bytes:
        """The archive an Extract's chunks carry, crediting each as it comes."""
        data = bytearray()
        while True:
            message, body = await self._inbox[rid].get()
            if not isinstance(message, protocol.ArchiveChunk):
                continue
            data += body
            if message.end:
                return bytes(data)
            if on_event is not None:
                on_event(frame_of(protocol.Credit(chunks=1), rid))

    def _extract(self, dest: str, archive: bytes) -> protocol.Transferred:
        files = size = 0
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            for member in tar.getmembers():
                path = posixpath.normpath(posixpath.join(dest, member.name))
                if member.isdir():
                    self._mkdirs(path)
                elif member.isfile():
                    data = tar.extractfile(member).read()  # type: ignore[union-attr]
                    self._put(path, data)
                    files, size = files + 1, size + len(data)
                else:
                    msg = f"{member.name}: the fake sandbox extracts files and directories only"
                    raise Refused(protocol.INVALID_ARGUMENTS, msg)
        return protocol.Transferred(files=files, bytes=size)

    def _archive(
        self, paths: list[str], rid: int, on_event: FrameSink | None
    ) -> protocol.Transferred:
        buffer, files, size = io.BytesIO(), 0, 0
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for top in paths:
                if not self._kind(top):
                    raise Refused(protocol.NOT_FOUND, f"{top}: no such file or directory")
                for path in [top, *self._below(top, recursive=True)]:
                    info = tarfile.TarInfo(posixpath.relpath(path, posixpath.dirname(top)))
                    if path in self.dirs:
                        info.type = tarfile.DIRTYPE
                        tar.addfile(info)
                        continue
                    data = self.files[path]
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                    files, size = files + 1, size + len(data)
        if on_event is not None:
            on_event(frame_of(protocol.ArchiveChunk(), rid, buffer.getvalue()))
        return protocol.Transferred(files=files, bytes=size)


class FakeBackend(SandboxBackend):
    """Sandboxes that live in this process; see the module docstring."""

    def __init__(self) -> None:
        self.sandboxes: dict[str, ConnectedSandbox] = {}
        self.channels: dict[str, FakeChannel] = {}
        self.requests: list[tuple[str, protocol.Message]] = []
        self.exec_script: ExecScript = exit_zero
        self.delay = 0.0

    def script(self, handler: ExecScript, delay: float = 0.0) -> None:
        """Answer every `exec` of every sandbox with `handler`, after `delay` s."""
        self.exec_script = handler
        self.delay = delay

    def execs(self) -> list[protocol.Exec]:
        return [r for _, r in self.requests if isinstance(r, protocol.Exec)]

    def lose(self, sandbox_id: str, reason: str = "the fake sandbox was lost") -> None:
        self.channels[sandbox_id].abort(reason)

    async def adopt(self, sandbox_id: str) -> Adopted:
        """The sandbox a previous core on this backend left: a new connection
        to the same files and kept answers."""
        channel = self.channels.get(sandbox_id)
        if channel is None:
            msg = f"no fake sandbox {sandbox_id}"
            raise SandboxLost(msg)
        channel.reattach()
        sandbox = ConnectedSandbox(sandbox_id, channel)
        hello = await sandbox.agent.hello(5.0)
        self.sandboxes[sandbox_id] = sandbox
        return Adopted(sandbox, hello)

    async def create(self, spec: SandboxSpec) -> ConnectedSandbox:
        channel = FakeChannel(spec.session_id, self)
        sandbox = ConnectedSandbox(spec.session_id, channel)
        await sandbox.agent.hello(5.0)
        self.channels[spec.session_id] = channel
        self.sandboxes[spec.session_id] = sandbox
        return sandbox

    async def destroy(self, sandbox_id: str) -> None:
        sandbox = self.sandboxes.pop(sandbox_id, None)
        self.channels.pop(sandbox_id, None)
        if sandbox is not None:
            sandbox.close()

    async def list_owned(self) -> list[str]:
        return list(self.sandboxes)

    async def reap_owned(self) -> int:
        owned = list(self.sandboxes)
        for sandbox_id in owned:
            await self.destroy(sandbox_id)
        return len(owned)

    async def close(self) -> None:
        """Nothing to release: sandboxes outlive a core like containers do
        (a daemon with shutdown = "close" removed its sessions already)."""
