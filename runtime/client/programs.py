"""The synchronous client's methods for programs: exec and files.

`Client.exec(session_id, ["sha256sum"], stdin=data)` runs a program to its
end; `Client.exec_stream(...)` starts one to talk to (stdin, signals, its
output as it comes). `read_file_bytes`, `write_file_bytes` and `stat` reach
any path the sandbox user may (relative paths are under /workspace).

Refusals are ToolrtRpcError with the daemon's `reason` (google.rpc.ErrorInfo);
those a program expects as OS errors are also the matching built-in:
FILE_NOT_FOUND is a FileNotFoundError, IS_A_DIRECTORY an IsADirectoryError,
NOT_A_DIRECTORY a NotADirectoryError, PERMISSION_DENIED and USER_NOT_ALLOWED
a PermissionError, FILE_EXISTS a FileExistsError, TIMEOUT a TimeoutError.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb

# Bytes per message of stdin or of a file sent.
SEND_CHUNK = 1 << 20
ERROR_DOMAIN = "toolrt"


class ToolrtRpcError(Exception):
    """An RPC failed with a gRPC status (not a tool failure: see Result.error);
    `reason` is the daemon's ErrorInfo reason ("" when it named none)."""

    def __init__(self, code: grpc.StatusCode, details: str, reason: str = "") -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.reason = reason


class RemoteFileNotFoundError(ToolrtRpcError, FileNotFoundError):
    pass


class RemoteIsADirectoryError(ToolrtRpcError, IsADirectoryError):
    pass


class RemoteNotADirectoryError(ToolrtRpcError, NotADirectoryError):
    pass


class RemotePermissionError(ToolrtRpcError, PermissionError):
    pass


class RemoteFileExistsError(ToolrtRpcError, FileExistsError):
    pass


class RemoteTimeoutError(ToolrtRpcError, TimeoutError):
    pass


BY_REASON: dict[str, type[ToolrtRpcError]] = {
    "FILE_NOT_FOUND": RemoteFileNotFoundError,
    "IS_A_DIRECTORY": RemoteIsADirectoryError,
    "NOT_A_DIRECTORY": RemoteNotADirectoryError,
    "PERMISSION_DENIED": RemotePermissionError,
    "USER_NOT_ALLOWED": RemotePermissionError,
    "FILE_EXISTS": RemoteFileExistsError,
    "TIMEOUT": RemoteTimeoutError,
}


def reason_of(exc: grpc.RpcError) -> str:
    """The ErrorInfo reason in a failed call's status details ("" if none)."""
    try:
        status = rpc_status.from_call(exc)
    except (ValueError, AttributeError):
        return ""
    for detail in status.details if status is not None else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Is(info.DESCRIPTOR) and detail.Unpack(info) and info.domain == ERROR_DOMAIN:
            return str(info.reason)
    return ""


def error_of(exc: grpc.RpcError) -> ToolrtRpcError:
    """The client's exception for a failed call, by the reason the daemon gave."""
    reason = reason_of(exc)
    cls = BY_REASON.get(reason, ToolrtRpcError)
    return cls(exc.code(), exc.details() or "", reason)


@dataclass(frozen=True)
class ExecResult:
    """A program's whole run: how it ended and all it printed (up to its cap)."""

    exec_id: str
    pid: int
    exit_code: int
    signal: str
    timed_out: bool
    stdout: bytes
    stderr: bytes
    stdout_dropped_bytes: int
    stderr_dropped_bytes: int


def exec_start(session_id: str, argv: list[str] | None, **fields: Any) -> pb.ExecRequest:
    return pb.ExecRequest(start=pb.ExecStart(session_id=session_id, argv=argv or [], **fields))


def stdin_requests(stdin: bytes | Iterable[bytes]) -> Iterator[pb.ExecRequest]:
    pieces = [stdin] if isinstance(stdin, bytes | bytearray) else stdin
    for piece in pieces:
        for start in range(0, len(piece), SEND_CHUNK):
            yield pb.ExecRequest(stdin=bytes(piece[start : start + SEND_CHUNK]))
    yield pb.ExecRequest(stdin_eof=True)


class ExecStream:
    """A running program: send it stdin and signals, read its events.

    `events()` yields ("started", ExecStarted), ("stdout", bytes),
    ("stderr", bytes) and last ("exit", ExecExit). Leaving it unfinished
    (`cancel()`, or the `with` block) kills the program's whole tree.
    """

    def __init__(self, client: Any, start: pb.ExecRequest, timeout: float | None) -> None:
        self._outbox: queue.Queue[pb.ExecRequest | None] = queue.Queue()
        self._outbox.put(start)
        self._closed = threading.Event()
        self._call = client.stub.Exec(self._requests(), timeout=timeout, metadata=client.metadata)

    def _requests(self) -> Iterator[pb.ExecRequest]:
        while True:
            item = self._outbox.get()
            if item is None:
                return
            yield item

    def write(self, data: bytes) -> None:
        for start in range(0, len(data), SEND_CHUNK):
            self._outbox.put(pb.ExecRequest(stdin=data[start : start + SEND_CHUNK]))

    def close_stdin(self) -> None:
        self._outbox.put(pb.ExecRequest(stdin_eof=True))

    def signal(self, name: str) -> None:
        self._outbox.put(pb.ExecRequest(signal=name))

    def events(self) -> Iterator[tuple[str, Any]]:
        try:
            for event in self._call:
                kind = event.WhichOneof("kind")
                if kind is not None:
                    yield kind, getattr(event, kind)
        except grpc.RpcError as exc:
            raise error_of(exc) from exc
        finally:
            self._outbox.put(None)

    def cancel(self) -> None:
        self._outbox.put(None)
        self._call.cancel()

    def __enter__(self) -> ExecStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


class ProgramMethods:
    """Exec and files; mixed into Client (which has `stub`, `metadata`, `timeout`)."""

    stub: Any
    metadata: tuple[tuple[str, str], ...]
    timeout: float | None

    def exec(
        self,
        session_id: str,
        argv: list[str] | None = None,
        *,
        command: str = "",
        stdin: bytes | Iterable[bytes] | None = None,
        timeout: float | None = None,
        **fields: Any,
    ) -> ExecResult:
        """Run `argv` (or `command` under /bin/sh -c) to its end; `stdin` is
        sent whole (any size, under flow control). `fields`: cwd, env,
        timeout_s, output_cap_bytes, exec_id, user. `timeout` is the RPC's
        deadline: past it the program's tree is killed."""
        start = exec_start(
            session_id, argv, command=command, stdin_open=stdin is not None, **fields
        )

        def requests() -> Iterator[pb.ExecRequest]:
            yield start
            if stdin is not None:
                yield from stdin_requests(stdin)

        out: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        started, ended = pb.ExecStarted(), pb.ExecExit()
        try:
            for event in self.stub.Exec(requests(), timeout=timeout, metadata=self.metadata):
                kind = event.WhichOneof("kind")
                if kind in out:
                    out[kind].append(getattr(event, kind))
                elif kind == "started":
                    started = event.started
                elif kind == "exit":
                    ended = event.exit
        except grpc.RpcError as exc:
            raise error_of(exc) from exc
        return ExecResult(
            exec_id=started.exec_id,
            pid=started.pid,
            exit_code=ended.exit_code,
            signal=ended.signal,
            timed_out=ended.timed_out,
            stdout=b"".join(out["stdout"]),
            stderr=b"".join(out["stderr"]),
            stdout_dropped_bytes=ended.stdout_dropped_bytes,
            stderr_dropped_bytes=ended.stderr_dropped_bytes,
        )

    def exec_stream(
        self,
        session_id: str,
        argv: list[str] | None = None,
        *,
        command: str = "",
        stdin_open: bool = True,
        timeout: float | None = None,
        **fields: Any,
    ) -> ExecStream:
        """Start `argv` (or `command`) and talk to it (ExecStream)."""
        start = exec_start(session_id, argv, command=command, stdin_open=stdin_open, **fields)
        return ExecStream(self, start, timeout)

    def read_file_bytes(
        self, session_id: str, path: str, *, offset: int = 0, max_bytes: int = 0, user: str = ""
    ) -> bytes:
        """The file's bytes from `offset`; more than `max_bytes` (0: the
        daemon's limit) raises ToolrtRpcError with reason FILE_TOO_LARGE."""
        request = pb.ReadFileRequest(
            session_id=session_id, path=path, offset=offset, max_bytes=max_bytes, user=user
        )
        try:
            chunks = self.stub.ReadFile(request, timeout=self.timeout, metadata=self.metadata)
            return b"".join(chunk.data for chunk in chunks)
        except grpc.RpcError as exc:
            raise error_of(exc) from exc

    def write_file_bytes(
        self,
        session_id: str,
        path: str,
        data: bytes | Iterable[bytes],
        *,
        mode: int = 0,
        make_parents: bool = False,
        if_exists: str = "replace",
        user: str = "",
    ) -> int:
        """Write `data` to the file as the sandbox user (an existing file keeps
        its inode, owner and mode; `mode` applies when it is created);
        `if_exists`: replace, fail or append. The bytes written."""
        start = pb.WriteFileStart(
            session_id=session_id,
            path=path,
            user=user,
            mode=mode,
            make_parents=make_parents,
            if_exists=if_exists,
        )

        def requests() -> Iterator[pb.WriteFileRequest]:
            yield pb.WriteFileRequest(start=start)
            pieces = [data] if isinstance(data, bytes | bytearray) else data
            for piece in pieces:
                for at in range(0, len(piece), SEND_CHUNK):
                    yield pb.WriteFileRequest(data=bytes(piece[at : at + SEND_CHUNK]))

        try:
            reply = self.stub.WriteFile(requests(), timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as exc:
            raise error_of(exc) from exc
        return int(reply.bytes)

    def stat(self, session_id: str, path: str, user: str = "") -> pb.PathInfo:
        """What is at `path` (a final symlink not followed): exists, type, size, mode, mtime."""
        request = pb.StatPathRequest(session_id=session_id, path=path, user=user)
        try:
            return self.stub.StatPath(request, timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as exc:
            raise error_of(exc) from exc


class SessionPrograms:
    """The same, on a session handle (which has `client` and `id`)."""

    client: ProgramMethods
    id: str

    def exec(self, argv: list[str] | None = None, **kwargs: Any) -> ExecResult:
        return self.client.exec(self.id, argv, **kwargs)

    def exec_stream(self, argv: list[str] | None = None, **kwargs: Any) -> ExecStream:
        return self.client.exec_stream(self.id, argv, **kwargs)

    def read_file_bytes(self, path: str, **kwargs: Any) -> bytes:
        return self.client.read_file_bytes(self.id, path, **kwargs)

    def write_file_bytes(self, path: str, data: bytes | Iterable[bytes], **kwargs: Any) -> int:
        return self.client.write_file_bytes(self.id, path, data, **kwargs)

    def stat(self, path: str, user: str = "") -> pb.PathInfo:
        return self.client.stat(self.id, path, user)
