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

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client.errors import rpc_errors
from runtime.client.rpcs import streamed

# Bytes per message of stdin or of a file sent.
SEND_CHUNK = 1 << 20


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


def exec_start(
    session_id: str,
    argv: list[str] | None,
    *,
    size: tuple[int, int] | None = None,
    **fields: Any,
) -> pb.ExecRequest:
    """An Exec's first message; `size` (rows, cols) is a `tty`'s window."""
    if size is not None:
        fields["size"] = pb.TerminalSize(rows=size[0], cols=size[1])
    return pb.ExecRequest(start=pb.ExecStart(session_id=session_id, argv=argv or [], **fields))


def stream_start(
    session_id: str,
    argv: list[str] | None,
    *,
    command: str = "",
    stdin_open: bool = True,
    timeout: float | None = None,
    **fields: Any,
) -> tuple[pb.ExecRequest, float | None]:
    """(first message, RPC deadline) of a program to talk to: `argv`, or
    `command` under /bin/sh -c; `fields`: ExecStart's (cwd, env, user, …),
    and `tty=True` with `size=(rows, cols)` for a terminal (its output all
    arrives as "stdout"; `resize()` changes its window; a b"\x03" written
    or `signal("INT")` interrupts what runs in its foreground)."""
    start = exec_start(session_id, argv, command=command, stdin_open=stdin_open, **fields)
    return start, timeout


def pieces(data: bytes | bytearray) -> Iterator[bytes]:
    """`data` in pieces of at most SEND_CHUNK bytes, one per message."""
    for start in range(0, len(data), SEND_CHUNK):
        yield bytes(data[start : start + SEND_CHUNK])


def stdin_messages(data: bytes | bytearray) -> Iterator[pb.ExecRequest]:
    return (pb.ExecRequest(stdin=piece) for piece in pieces(data))


def stdin_requests(stdin: bytes | Iterable[bytes]) -> Iterator[pb.ExecRequest]:
    chunks = [stdin] if isinstance(stdin, bytes | bytearray) else stdin
    for chunk in chunks:
        yield from stdin_messages(chunk)
    yield STDIN_EOF


STDIN_EOF = pb.ExecRequest(stdin_eof=True)


def resize_request(rows: int, cols: int) -> pb.ExecRequest:
    return pb.ExecRequest(resize=pb.TerminalSize(rows=rows, cols=cols))


def exec_item(event: pb.ExecEvent) -> tuple[str, Any] | None:
    """("started" | "stdout" | "stderr" | "exit", its value) of one Exec event."""
    kind = event.WhichOneof("kind")
    return None if kind is None else (kind, getattr(event, kind))


class ExecCollector:
    """An ExecResult gathered from a program's events."""

    def __init__(self) -> None:
        self.out: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        self.started, self.ended = pb.ExecStarted(), pb.ExecExit()

    def add(self, event: pb.ExecEvent) -> None:
        item = exec_item(event)
        if item is None:
            return
        kind, value = item
        if kind in self.out:
            self.out[kind].append(value)
        elif kind == "started":
            self.started = value
        elif kind == "exit":
            self.ended = value

    def result(self) -> ExecResult:
        started, ended = self.started, self.ended
        return ExecResult(
            exec_id=started.exec_id,
            pid=started.pid,
            exit_code=ended.exit_code,
            signal=ended.signal,
            timed_out=ended.timed_out,
            stdout=b"".join(self.out["stdout"]),
            stderr=b"".join(self.out["stderr"]),
            stdout_dropped_bytes=ended.stdout_dropped_bytes,
            stderr_dropped_bytes=ended.stderr_dropped_bytes,
        )


def read_file_request(
    session_id: str, path: str, offset: int, max_bytes: int, user: str
) -> pb.ReadFileRequest:
    return pb.ReadFileRequest(
        session_id=session_id, path=path, offset=offset, max_bytes=max_bytes, user=user
    )


def write_file_head(session_id: str, path: str, **fields: Any) -> pb.WriteFileRequest:
    """The first WriteFile message; `fields`: mode, make_parents, if_exists, user."""
    return pb.WriteFileRequest(start=pb.WriteFileStart(session_id=session_id, path=path, **fields))


def write_file_messages(data: bytes | bytearray) -> Iterator[pb.WriteFileRequest]:
    return (pb.WriteFileRequest(data=piece) for piece in pieces(data))


def stat_request(session_id: str, path: str, user: str) -> pb.StatPathRequest:
    return pb.StatPathRequest(session_id=session_id, path=path, user=user)


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
        for message in stdin_messages(data):
            self._outbox.put(message)

    def close_stdin(self) -> None:
        self._outbox.put(STDIN_EOF)

    def resize(self, rows: int, cols: int) -> None:
        """The terminal's new size (a `tty` program)."""
        self._outbox.put(resize_request(rows, cols))

    def signal(self, name: str) -> None:
        self._outbox.put(pb.ExecRequest(signal=name))

    def events(self) -> Iterator[tuple[str, Any]]:
        try:
            with rpc_errors():
                for event in self._call:
                    if (item := exec_item(event)) is not None:
                        yield item
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
        timeout_s, output_cap_bytes, exec_id, user, tty and size (rows,
        cols). `timeout` is the RPC's deadline: past it the program's tree
        is killed."""
        start = exec_start(
            session_id, argv, command=command, stdin_open=stdin is not None, **fields
        )

        def requests() -> Iterator[pb.ExecRequest]:
            yield start
            if stdin is not None:
                yield from stdin_requests(stdin)

        collector = ExecCollector()
        with rpc_errors():
            for event in self.stub.Exec(requests(), timeout=timeout, metadata=self.metadata):
                collector.add(event)
        return collector.result()

    def exec_stream(
        self, session_id: str, argv: list[str] | None = None, **options: Any
    ) -> ExecStream:
        """Start `argv` (or `command`) and talk to it (ExecStream); `options`
        as stream_start's."""
        return ExecStream(self, *stream_start(session_id, argv, **options))

    def read_file_chunks(
        self, session_id: str, path: str, *, offset: int = 0, max_bytes: int = 0, user: str = ""
    ) -> Iterator[bytes]:
        """The file's bytes from `offset`, chunk by chunk as they arrive."""
        request = read_file_request(session_id, path, offset, max_bytes, user)
        call = self.stub.ReadFile(request, timeout=self.timeout, metadata=self.metadata)
        return streamed(call, lambda chunk: chunk.data)

    def read_file_bytes(self, session_id: str, path: str, **fields: Any) -> bytes:
        """The whole file; more than `max_bytes` (0: the daemon's limit)
        raises ToolrtRpcError with reason FILE_TOO_LARGE, never a cut."""
        return b"".join(self.read_file_chunks(session_id, path, **fields))

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
        head = write_file_head(
            session_id, path, user=user, mode=mode, make_parents=make_parents, if_exists=if_exists
        )

        def requests() -> Iterator[pb.WriteFileRequest]:
            yield head
            for chunk in [data] if isinstance(data, bytes | bytearray) else data:
                yield from write_file_messages(chunk)

        with rpc_errors():
            reply = self.stub.WriteFile(requests(), timeout=self.timeout, metadata=self.metadata)
        return int(reply.bytes)

    def stat(self, session_id: str, path: str, user: str = "") -> pb.PathInfo:
        """What is at `path` (a final symlink not followed): exists, type, size, mode, mtime."""
        with rpc_errors():
            return self.stub.StatPath(
                stat_request(session_id, path, user), timeout=self.timeout, metadata=self.metadata
            )


class SessionPrograms:
    """The same, on a session handle (which has `client` and `id`)."""

    client: ProgramMethods
    id: str

    def exec(self, argv: list[str] | None = None, **kwargs: Any) -> ExecResult:
        return self.client.exec(self.id, argv, **kwargs)

    def exec_stream(self, argv: list[str] | None = None, **kwargs: Any) -> ExecStream:
        return self.client.exec_stream(self.id, argv, **kwargs)

    def read_file_chunks(self, path: str, **kwargs: Any) -> Iterator[bytes]:
        return self.client.read_file_chunks(self.id, path, **kwargs)

    def read_file_bytes(self, path: str, **kwargs: Any) -> bytes:
        return self.client.read_file_bytes(self.id, path, **kwargs)

    def write_file_bytes(self, path: str, data: bytes | Iterable[bytes], **kwargs: Any) -> int:
        return self.client.write_file_bytes(self.id, path, data, **kwargs)

    def stat(self, path: str, user: str = "") -> pb.PathInfo:
        return self.client.stat(self.id, path, user)
