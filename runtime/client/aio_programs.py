"""The async client's methods for programs: exec and files (see programs.py).

The requests and the reading of the answers are programs.py's; only the
waiting differs. Refusals raise the same exceptions (errors.py): a missing
file is a FileNotFoundError, a read-only one a PermissionError, and so on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from typing import Any, TypeVar

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client.errors import rpc_errors
from runtime.client.programs import (
    STDIN_EOF,
    ExecCollector,
    ExecResult,
    exec_item,
    exec_start,
    read_file_request,
    resize_request,
    stat_request,
    stdin_messages,
    stream_start,
    write_file_head,
    write_file_messages,
)

T = TypeVar("T")
ByteSource = bytes | Iterable[bytes] | AsyncIterable[bytes]
# Messages a program's stdin may have queued before write() waits for gRPC.
OUTBOX_MESSAGES = 8


async def chunks_of(source: ByteSource) -> AsyncIterator[bytes]:
    """The chunks of bytes, of a sync iterable or of an async one."""
    if isinstance(source, bytes):
        yield source
    elif isinstance(source, AsyncIterable):
        async for chunk in source:
            yield chunk
    else:
        for chunk in source:
            yield chunk


async def streamed(call: Any, read: Callable[[Any], T]) -> AsyncIterator[T]:
    """What `read` takes from each message of a server stream, as they
    arrive; leaving early (or a cancelled task) cancels the RPC."""
    try:
        with rpc_errors():
            async for message in call:
                yield read(message)
    finally:
        call.cancel()


class AsyncExecStream:
    """A running program: send it stdin, resizes and signals, read its events.

    `events()` yields ("started", ExecStarted), ("stdout", bytes),
    ("stderr", bytes) and last ("exit", ExecExit). Leaving it unfinished
    (`cancel()`, the `async with` block, a cancelled task) kills the
    program's whole tree.
    """

    def __init__(self, client: Any, start: pb.ExecRequest, timeout: float | None) -> None:
        # Bounded: write() waits while gRPC has not sent what came before.
        self._outbox: asyncio.Queue[pb.ExecRequest | None] = asyncio.Queue(OUTBOX_MESSAGES)
        self._outbox.put_nowait(start)
        self._call = client.stub.Exec(self._requests(), timeout=timeout, metadata=client.metadata)

    async def _requests(self) -> AsyncIterator[pb.ExecRequest]:
        while (item := await self._outbox.get()) is not None:
            yield item

    async def write(self, data: bytes) -> None:
        for message in stdin_messages(data):
            await self._outbox.put(message)

    async def close_stdin(self) -> None:
        await self._outbox.put(STDIN_EOF)

    async def resize(self, rows: int, cols: int) -> None:
        """The terminal's new size (a `tty` program)."""
        await self._outbox.put(resize_request(rows, cols))

    async def signal(self, name: str) -> None:
        await self._outbox.put(pb.ExecRequest(signal=name))

    async def events(self) -> AsyncIterator[tuple[str, Any]]:
        try:
            with rpc_errors():
                async for event in self._call:
                    if (item := exec_item(event)) is not None:
                        yield item
        finally:
            self.cancel()

    def cancel(self) -> None:
        self._call.cancel()

    async def __aenter__(self) -> AsyncExecStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()


class AsyncProgramMethods:
    """Exec and files; mixed into AsyncClient (which has `stub`, `metadata`, `timeout`)."""

    stub: Any
    metadata: tuple[tuple[str, str], ...]
    timeout: float | None

    async def exec(
        self,
        session_id: str,
        argv: list[str] | None = None,
        *,
        command: str = "",
        stdin: ByteSource | None = None,
        timeout: float | None = None,
        **fields: Any,
    ) -> ExecResult:
        """Run `argv` (or `command` under /bin/sh -c) to its end; `stdin`
        (bytes, or chunks from a sync or async iterable) is sent as gRPC's
        flow control asks. `fields`: cwd, env, timeout_s, output_cap_bytes,
        exec_id, user, tty, size (rows, cols). `timeout` is the RPC's deadline: past it,
        or when the awaiting task is cancelled, the program's tree is killed."""
        start = exec_start(
            session_id, argv, command=command, stdin_open=stdin is not None, **fields
        )

        async def requests() -> AsyncIterator[pb.ExecRequest]:
            yield start
            if stdin is not None:
                async for chunk in chunks_of(stdin):
                    for message in stdin_messages(chunk):
                        yield message
                yield STDIN_EOF

        collector = ExecCollector()
        call = self.stub.Exec(requests(), timeout=timeout, metadata=self.metadata)
        try:
            with rpc_errors():
                async for event in call:
                    collector.add(event)
        finally:
            call.cancel()
        return collector.result()

    def exec_stream(
        self, session_id: str, argv: list[str] | None = None, **options: Any
    ) -> AsyncExecStream:
        """Start `argv` (or `command`) and talk to it (AsyncExecStream);
        `options` as stream_start's."""
        return AsyncExecStream(self, *stream_start(session_id, argv, **options))

    async def read_file_chunks(
        self, session_id: str, path: str, *, offset: int = 0, max_bytes: int = 0, user: str = ""
    ) -> AsyncIterator[bytes]:
        """The file's bytes from `offset`, chunk by chunk as they arrive."""
        request = read_file_request(session_id, path, offset, max_bytes, user)
        call = self.stub.ReadFile(request, timeout=self.timeout, metadata=self.metadata)
        async for data in streamed(call, lambda chunk: chunk.data):
            yield data

    async def read_file_bytes(self, session_id: str, path: str, **fields: Any) -> bytes:
        """The whole file; more than `max_bytes` (0: the daemon's limit) raises
        ToolrtRpcError with reason FILE_TOO_LARGE, never a cut."""
        return b"".join([c async for c in self.read_file_chunks(session_id, path, **fields)])

    async def write_file_bytes(
        self, session_id: str, path: str, data: ByteSource, **fields: Any
    ) -> int:
        """Write `data` to the file (`fields`: mode, make_parents, if_exists,
        user; see Client.write_file_bytes). The bytes written."""

        async def requests() -> AsyncIterator[pb.WriteFileRequest]:
            yield write_file_head(session_id, path, **fields)
            async for chunk in chunks_of(data):
                for message in write_file_messages(chunk):
                    yield message

        with rpc_errors():
            reply = await self.stub.WriteFile(
                requests(), timeout=self.timeout, metadata=self.metadata
            )
        return int(reply.bytes)

    async def stat(self, session_id: str, path: str, user: str = "") -> pb.PathInfo:
        """What is at `path` (a final symlink not followed): exists, type, size, mode, mtime."""
        request = stat_request(session_id, path, user)
        with rpc_errors():
            return await self.stub.StatPath(request, timeout=self.timeout, metadata=self.metadata)


class AsyncSessionPrograms:
    """The same, on a session (which has `client` and `id`)."""

    client: AsyncProgramMethods  # an AsyncClient
    id: str

    async def exec(self, argv: list[str] | None = None, **kwargs: Any) -> ExecResult:
        return await self.client.exec(self.id, argv, **kwargs)

    def exec_stream(self, argv: list[str] | None = None, **kwargs: Any) -> AsyncExecStream:
        return self.client.exec_stream(self.id, argv, **kwargs)

    def read_file_chunks(self, path: str, **kwargs: Any) -> AsyncIterator[bytes]:
        return self.client.read_file_chunks(self.id, path, **kwargs)

    async def read_file_bytes(self, path: str, **kwargs: Any) -> bytes:
        return await self.client.read_file_bytes(self.id, path, **kwargs)

    async def write_file_bytes(self, path: str, data: ByteSource, **kwargs: Any) -> int:
        return await self.client.write_file_bytes(self.id, path, data, **kwargs)

    async def stat(self, path: str, user: str = "") -> pb.PathInfo:
        return await self.client.stat(self.id, path, user)
