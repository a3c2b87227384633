"""Async client on grpc.aio, for harnesses that run in an event loop.

    async with AsyncClient(addr) as c, c.session() as s:
        result = await s.shell("ls")

The same surface, credentials (arguments, else `TOOLRT_TARGET`, `TOOLRT_TOKEN`,
`TOOLRT_TLS_*`) and errors (`ToolrtRpcError`) as the synchronous `Client`:
both build their requests and read their answers with `rpcs.py`. Cancelling
the task that awaits a call cancels its RPC, and the daemon stops the call.
Streams and downloads are async iterators; leave one early inside
`contextlib.aclosing(...)` to cancel its RPC at once rather than when the
iterator is collected.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator
from typing import Any, TypeVar

import grpc
import grpc.aio

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import rpcs
from runtime.client.aio_programs import (
    AsyncExecStream,
    AsyncProgramMethods,
    AsyncSessionPrograms,
    ByteSource,
    chunks_of,
    streamed,
)
from runtime.client.programs import ExecResult
from runtime.client.rpcs import TLS, Arguments, Result, ToolrtRpcError, rpc_errors
from runtime.constants import WORKSPACE

__all__ = [
    "TLS",
    "AsyncClient",
    "AsyncExecStream",
    "AsyncSession",
    "ExecResult",
    "OpeningSession",
    "Result",
    "ToolrtRpcError",
]
T = TypeVar("T")


class AsyncClient(rpcs.Connected, AsyncProgramMethods):
    api = grpc.aio
    channel: grpc.aio.Channel

    async def _unary(self, rpc: rpcs.Unary[T], timeout: float | None = None) -> T:
        method = getattr(self.stub, rpc.method)
        with rpc_errors():
            reply = await method(rpc.request, timeout=timeout, metadata=self.metadata)
        return rpc.read(reply)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.channel.close()

    async def create_session(self, **fields: Any) -> pb.Session:
        return await self._unary(rpcs.create_session(**fields), self.timeout)

    def session(self, **fields: Any) -> OpeningSession:
        """`await c.session()`, or `async with c.session() as s` to close it at the end."""
        return OpeningSession(self, fields)

    async def get_session(self, session_id: str) -> pb.Session:
        return await self._unary(rpcs.get_session(session_id))

    async def list_sessions(self) -> list[pb.Session]:
        return await self._unary(rpcs.list_sessions())

    async def close_session(self, session_id: str) -> str:
        return await self._unary(rpcs.close_session(session_id))

    async def admin_stats(self) -> pb.AdminStatsResponse:
        """The daemon's state (an admin principal's call)."""
        return await self._unary(rpcs.admin_stats(), self.timeout)

    async def admin_sessions(self, tenant: str = "", usage: bool = False) -> list[pb.AdminSession]:
        """Every tenant's open sessions (or `tenant`'s), with CPU and memory when `usage`."""
        return await self._unary(rpcs.admin_sessions(tenant, usage), self.timeout)

    async def list_tools(self, dialect: str = "", session_id: str = "") -> list[dict[str, Any]]:
        """The catalog; with `session_id`, descriptions say that session's network."""
        return await self._unary(rpcs.list_tools(dialect, session_id))

    async def call(
        self,
        session_id: str,
        tool: str,
        arguments: Arguments,
        call_id: str = "",
        timeout: float | None = None,
    ) -> Result:
        """One call; `timeout` is the RPC deadline (the daemon then stops the call)."""
        return await self._unary(rpcs.execute(session_id, tool, arguments, call_id), timeout)

    async def batch(self, session_id: str, calls: list[tuple[str, Arguments]]) -> list[Result]:
        """Several (tool, arguments) calls in one RPC; the results in order."""
        return await self._unary(rpcs.execute_batch(session_id, calls), self.timeout)

    async def execute_message(
        self, session_id: str, dialect: str, message: Any
    ) -> tuple[Any, list[Result]]:
        """Every tool call in a provider message: (what to append, the results)."""
        return await self._unary(rpcs.execute_message(session_id, dialect, message), self.timeout)

    async def stream(
        self, session_id: str, tool: str, arguments: Arguments, call_id: str = ""
    ) -> AsyncIterator[tuple[str, bytes] | Result]:
        """Yields ("stdout"|"stderr", chunk) as output arrives, then the Result."""
        request = rpcs.stream_request(session_id, tool, arguments, call_id)
        events = self.stub.ExecuteStream(request, metadata=self.metadata)
        try:
            with rpc_errors():
                async for event in events:
                    if (item := rpcs.stream_item(event)) is not None:
                        yield item
        finally:
            # A reader that stops (break, cancelled task) stops the call too.
            events.cancel()

    async def upload(
        self, session_id: str, tar: ByteSource, path: str = WORKSPACE
    ) -> tuple[int, int]:
        """Unpack a tar archive below `path`: bytes, or its chunks from a sync or
        async iterable, read as gRPC's flow control asks; (files, bytes)."""

        async def messages() -> AsyncIterator[pb.UploadFilesRequest]:
            yield rpcs.upload_head(session_id, path)
            async for chunk in chunks_of(tar):
                for message in rpcs.upload_pieces(chunk):
                    yield message

        with rpc_errors():
            reply = await self.stub.UploadFiles(
                messages(), timeout=self.timeout, metadata=self.metadata
            )
        return rpcs.read_upload(reply)

    async def download_chunks(self, session_id: str, paths: list[str]) -> AsyncIterator[bytes]:
        """A tar archive of sandbox `paths` (each under its base name), chunk by
        chunk: the next is read from the daemon only when asked for."""
        request = pb.DownloadFilesRequest(session_id=session_id, paths=paths)
        call = self.stub.DownloadFiles(request, timeout=self.timeout, metadata=self.metadata)
        async for tar in streamed(call, lambda chunk: chunk.tar):
            yield tar

    async def download(self, session_id: str, paths: list[str]) -> bytes:
        """The whole archive in memory (download_chunks for large ones)."""
        return b"".join([chunk async for chunk in self.download_chunks(session_id, paths)])

    # -- snapshots (files and shell state, never processes) -------------------
    async def snapshot(
        self, session_id: str, label: str = "", include_tmp: bool = False
    ) -> pb.Snapshot:
        """Keep the session's /workspace (and /tmp), cwd and persisted env."""
        return await self._unary(rpcs.snapshot(session_id, label, include_tmp), self.timeout)

    async def fork(self, source: str, count: int = 1) -> list[AsyncSession]:
        """`count` new sessions from a live session or a snapshot ("snap_…"), all or none."""
        made = await self._unary(rpcs.fork(source, count), self.timeout)
        return [AsyncSession(self, s) for s in made]

    async def restore(self, session_id: str, snapshot_id: str) -> pb.RestoreSessionResponse:
        """Roll the session back to the snapshot in place (its background processes stop)."""
        return await self._unary(rpcs.restore(session_id, snapshot_id), self.timeout)

    async def list_snapshots(self) -> list[pb.Snapshot]:
        return await self._unary(rpcs.list_snapshots())

    async def delete_snapshot(self, snapshot_id: str) -> None:
        await self._unary(rpcs.delete_snapshot(snapshot_id))


class AsyncSession(AsyncSessionPrograms):
    """One session's calls; `async with` closes it at the end of the block."""

    client: AsyncClient

    def __init__(self, client: AsyncClient, session: pb.Session) -> None:
        self.client = client
        self.info = session
        self.id: str = session.id

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.client.close_session(self.id)

    async def call(self, tool: str, arguments: Arguments, call_id: str = "") -> Result:
        return await self.client.call(self.id, tool, arguments, call_id)

    async def shell(self, command: str, **arguments: Any) -> Result:
        return await self.call("shell", {"command": command, **arguments})

    async def batch(self, calls: list[tuple[str, Arguments]]) -> list[Result]:
        return await self.client.batch(self.id, calls)

    async def execute_message(self, dialect: str, message: Any) -> tuple[Any, list[Result]]:
        return await self.client.execute_message(self.id, dialect, message)

    def stream(self, tool: str, arguments: Arguments) -> AsyncIterator[tuple[str, bytes] | Result]:
        return self.client.stream(self.id, tool, arguments)

    async def upload(self, tar: ByteSource, path: str = WORKSPACE) -> tuple[int, int]:
        return await self.client.upload(self.id, tar, path)

    def download_chunks(self, paths: list[str]) -> AsyncIterator[bytes]:
        return self.client.download_chunks(self.id, paths)

    async def download(self, paths: list[str]) -> bytes:
        return await self.client.download(self.id, paths)

    async def snapshot(self, label: str = "", include_tmp: bool = False) -> pb.Snapshot:
        return await self.client.snapshot(self.id, label, include_tmp)

    async def fork(self, count: int = 1) -> list[AsyncSession]:
        return await self.client.fork(self.id, count)

    async def restore(self, snapshot_id: str) -> list[str]:
        """Roll back to `snapshot_id`; the ids of the background processes stopped."""
        reply = await self.client.restore(self.id, snapshot_id)
        return list(reply.stopped_process_ids)


class OpeningSession:
    """A session being created: await it, or use it in `async with`, which
    closes the session when the block ends."""

    def __init__(self, client: AsyncClient, fields: dict[str, Any]) -> None:
        self._client = client
        self._fields = fields
        self._session: AsyncSession | None = None

    async def _open(self) -> AsyncSession:
        return AsyncSession(self._client, await self._client.create_session(**self._fields))

    def __await__(self) -> Generator[Any, None, AsyncSession]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncSession:
        self._session = await self._open()
        return self._session

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
