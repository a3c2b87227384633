"""Synchronous client: `with Client(addr) as c, c.session() as s: s.shell("ls")`.

`Client(target, token=..., tls=...)`: without arguments the target is
`TOOLRT_TARGET` (else 127.0.0.1:50051) and the token `TOOLRT_TOKEN` (else
none); `tls` is True (the system's CAs), a `TLS` (your CA, a client
certificate for mutual TLS), gRPC channel credentials, or False (plaintext);
without it, `TOOLRT_TLS_CA`/`_CERT`/`_KEY` ask for TLS as they do of the CLI.
The async client with the same surface is `runtime.client.aio.AsyncClient`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any, TypeVar

import grpc

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import rpcs
from runtime.client.programs import ProgramMethods, SessionPrograms
from runtime.client.rpcs import (
    SNAPSHOT_PREFIX,
    TLS,
    UPLOAD_CHUNK,
    Arguments,
    Metadata,
    Result,
    ToolrtRpcError,
    bearer_metadata,
    rpc_errors,
)
from runtime.constants import WORKSPACE

__all__ = [
    "SNAPSHOT_PREFIX",
    "TLS",
    "UPLOAD_CHUNK",
    "Client",
    "Metadata",
    "Result",
    "SessionHandle",
    "ToolrtRpcError",
    "bearer_metadata",
]
T = TypeVar("T")


class Client(rpcs.Connected, ProgramMethods):
    api = grpc
    channel: grpc.Channel

    def _rpc(self, fn: Any, request: Any, timeout: float | None = None) -> Any:
        with rpc_errors():
            return fn(request, timeout=timeout, metadata=self.metadata)

    def _unary(self, rpc: rpcs.Unary[T], timeout: float | None = None) -> T:
        return rpc.read(self._rpc(getattr(self.stub, rpc.method), rpc.request, timeout))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def create_session(self, **fields: Any) -> pb.Session:
        return self._unary(rpcs.create_session(**fields), self.timeout)

    def session(self, **fields: Any) -> SessionHandle:
        """A session that is closed when the `with` block ends."""
        return SessionHandle(self, self.create_session(**fields))

    def get_session(self, session_id: str) -> pb.Session:
        return self._unary(rpcs.get_session(session_id))

    def list_sessions(self) -> list[pb.Session]:
        return self._unary(rpcs.list_sessions())

    def close_session(self, session_id: str) -> str:
        return self._unary(rpcs.close_session(session_id))

    def admin_stats(self) -> pb.AdminStatsResponse:
        """The daemon's state (an admin principal's call)."""
        return self._unary(rpcs.admin_stats(), self.timeout)

    def admin_sessions(self, tenant: str = "", usage: bool = False) -> list[pb.AdminSession]:
        """Every tenant's open sessions (or `tenant`'s), with CPU and memory when `usage`."""
        return self._unary(rpcs.admin_sessions(tenant, usage), self.timeout)

    def list_tools(self, dialect: str = "", session_id: str = "") -> list[dict[str, Any]]:
        """The catalog; with `session_id`, descriptions say that session's network."""
        return self._unary(rpcs.list_tools(dialect, session_id))

    def call(
        self,
        session_id: str,
        tool: str,
        arguments: Arguments,
        call_id: str = "",
        timeout: float | None = None,
    ) -> Result:
        """One call; `timeout` is the RPC deadline (the daemon then stops the call)."""
        return self._unary(rpcs.execute(session_id, tool, arguments, call_id), timeout)

    def batch(self, session_id: str, calls: list[tuple[str, Arguments]]) -> list[Result]:
        """Several (tool, arguments) calls in one RPC; the results in order."""
        return self._unary(rpcs.execute_batch(session_id, calls), self.timeout)

    def execute_message(
        self, session_id: str, dialect: str, message: Any
    ) -> tuple[Any, list[Result]]:
        """Run every tool call in a provider message (a dict/list or its JSON text).

        Returns what to append to the conversation (the provider's shape) and
        the neutral results, one per call in order.
        """
        return self._unary(rpcs.execute_message(session_id, dialect, message), self.timeout)

    def stream(
        self, session_id: str, tool: str, arguments: Arguments, call_id: str = ""
    ) -> Iterator[tuple[str, bytes] | Result]:
        """Yields ("stdout"|"stderr", chunk) as output arrives, then the Result."""
        request = rpcs.stream_request(session_id, tool, arguments, call_id)
        events = self.stub.ExecuteStream(request, metadata=self.metadata)
        try:
            with rpc_errors():
                for event in events:
                    if (item := rpcs.stream_item(event)) is not None:
                        yield item
        finally:
            # A caller that stops reading (Ctrl-C, break) stops the call too.
            events.cancel()

    def upload(
        self, session_id: str, tar: bytes | Iterable[bytes], path: str = WORKSPACE
    ) -> tuple[int, int]:
        """Unpack a tar archive (bytes, or its chunks) below `path`; (files, bytes)."""
        chunks = [tar] if isinstance(tar, bytes) else tar

        def messages() -> Iterator[pb.UploadFilesRequest]:
            yield rpcs.upload_head(session_id, path)
            for chunk in chunks:
                yield from rpcs.upload_pieces(chunk)

        reply = self._rpc(self.stub.UploadFiles, messages(), self.timeout)
        return rpcs.read_upload(reply)

    # -- snapshots (files and shell state, never processes) -------------------
    def snapshot(self, session_id: str, label: str = "", include_tmp: bool = False) -> pb.Snapshot:
        """Keep the session's /workspace (and /tmp), cwd and persisted env."""
        return self._unary(rpcs.snapshot(session_id, label, include_tmp), self.timeout)

    def fork(self, source: str, count: int = 1) -> list[SessionHandle]:
        """`count` new sessions from a live session or a snapshot ("snap_…"), all or none."""
        return [SessionHandle(self, s) for s in self._unary(rpcs.fork(source, count), self.timeout)]

    def restore(self, session_id: str, snapshot_id: str) -> pb.RestoreSessionResponse:
        """Roll the session back to the snapshot in place (its background processes stop)."""
        return self._unary(rpcs.restore(session_id, snapshot_id), self.timeout)

    def list_snapshots(self) -> list[pb.Snapshot]:
        return self._unary(rpcs.list_snapshots())

    def delete_snapshot(self, snapshot_id: str) -> None:
        self._unary(rpcs.delete_snapshot(snapshot_id))

    def download_chunks(self, session_id: str, paths: list[str]) -> Iterator[bytes]:
        """A tar archive of sandbox `paths` (each under its base name), chunk by chunk."""
        request = pb.DownloadFilesRequest(session_id=session_id, paths=paths)
        call = self.stub.DownloadFiles(request, timeout=self.timeout, metadata=self.metadata)
        return rpcs.streamed(call, lambda chunk: chunk.tar)

    def download(self, session_id: str, paths: list[str]) -> bytes:
        """A tar archive of sandbox `paths`, each stored under its base name."""
        return b"".join(self.download_chunks(session_id, paths))


class SessionHandle(SessionPrograms):
    client: Client

    def __init__(self, client: Client, session: pb.Session) -> None:
        self.client = client
        self.info = session
        self.id: str = session.id

    def __enter__(self) -> SessionHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self.client.close_session(self.id)

    def call(self, tool: str, arguments: Arguments, call_id: str = "") -> Result:
        return self.client.call(self.id, tool, arguments, call_id)

    def batch(self, calls: list[tuple[str, Arguments]]) -> list[Result]:
        return self.client.batch(self.id, calls)

    def stream(self, tool: str, arguments: Arguments) -> Iterator[tuple[str, bytes] | Result]:
        return self.client.stream(self.id, tool, arguments)

    def execute_message(self, dialect: str, message: Any) -> tuple[Any, list[Result]]:
        return self.client.execute_message(self.id, dialect, message)

    def shell(self, command: str, **arguments: Any) -> Result:
        return self.call("shell", {"command": command, **arguments})

    def upload(self, tar: bytes | Iterable[bytes], path: str = WORKSPACE) -> tuple[int, int]:
        return self.client.upload(self.id, tar, path)

    def download_chunks(self, paths: list[str]) -> Iterator[bytes]:
        return self.client.download_chunks(self.id, paths)

    def download(self, paths: list[str]) -> bytes:
        return self.client.download(self.id, paths)

    def snapshot(self, label: str = "", include_tmp: bool = False) -> pb.Snapshot:
        return self.client.snapshot(self.id, label, include_tmp)

    def fork(self, count: int = 1) -> list[SessionHandle]:
        return self.client.fork(self.id, count)

    def restore(self, snapshot_id: str) -> list[str]:
        """Roll back to `snapshot_id`; the ids of the background processes stopped."""
        return list(self.client.restore(self.id, snapshot_id).stopped_process_ids)
