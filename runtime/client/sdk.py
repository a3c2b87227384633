"""Synchronous client: `with Client(addr) as c, c.session() as s: s.shell("ls")`.

`Client(target, token=..., tls=...)`: without arguments the target is
`TOOLRT_TARGET` (else 127.0.0.1:50051) and the token `TOOLRT_TOKEN` (else
none); `tls` is True (the system's CAs), a `TLS` (your CA, a client
certificate for mutual TLS) or gRPC channel credentials.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import grpc

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime._proto.toolruntime.v1 import runtime_pb2_grpc as pb_grpc
from runtime.client.programs import ProgramMethods, SessionPrograms, error_of

# Defined beside the errors it is the base of; still importable from here.
from runtime.client.programs import ToolrtRpcError as ToolrtRpcError
from runtime.constants import DEFAULT_TARGET, WORKSPACE

UPLOAD_CHUNK = 1 << 20
# Snapshot ids start with it; session ids never do.
SNAPSHOT_PREFIX = "snap_"
Metadata = tuple[tuple[str, str], ...]


def bearer_metadata(token: str) -> Metadata:
    """Call metadata carrying a bearer token (none without one)."""
    return (("authorization", f"Bearer {token}"),) if token else ()


@dataclass(frozen=True)
class Result:
    call_id: str
    ok: bool
    output: dict[str, Any]
    error_code: str
    error_message: str
    duration_ms: int

    @classmethod
    def from_pb(cls, msg: pb.ToolResult) -> Result:
        return cls(
            call_id=msg.call_id,
            ok=msg.ok,
            output=json.loads(msg.output_json or "{}"),
            error_code=msg.error.code,
            error_message=msg.error.message,
            duration_ms=msg.duration_ms,
        )


@dataclass(frozen=True)
class TLS:
    """TLS to the daemon: which CA to trust, and a client certificate for mutual TLS."""

    # PEM bundle of the CA that signed the daemon's certificate ("" = the system's).
    ca_file: str = ""
    # PEM certificate and key of this client (mutual TLS; both or neither).
    cert_file: str = ""
    key_file: str = ""
    # The name to check the daemon's certificate against, when not the target's host.
    server_name: str = ""

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path: str) -> bytes | None:
            if not path:
                return None
            with open(path, "rb") as f:
                return f.read()

        return grpc.ssl_channel_credentials(
            read(self.ca_file), read(self.key_file), read(self.cert_file)
        )


class Client(ProgramMethods):
    def __init__(
        self,
        target: str | None = None,
        timeout: float | None = None,
        *,
        token: str | None = None,
        tls: bool | TLS | grpc.ChannelCredentials | None = None,
    ) -> None:
        target = target or os.environ.get("TOOLRT_TARGET") or DEFAULT_TARGET
        token = os.environ.get("TOOLRT_TOKEN", "") if token is None else token
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", 64 << 20),
            ("grpc.max_send_message_length", 64 << 20),
        ]
        if isinstance(tls, TLS) and tls.server_name:
            options.append(("grpc.ssl_target_name_override", tls.server_name))
        if tls is None or tls is False:
            self.channel = grpc.insecure_channel(target, options=options)
        else:
            if tls is True:
                creds = grpc.ssl_channel_credentials()
            elif isinstance(tls, TLS):
                creds = tls.credentials()
            else:
                creds = tls
            self.channel = grpc.secure_channel(target, creds, options=options)
        self.stub = pb_grpc.ToolRuntimeStub(self.channel)
        self.timeout = timeout
        # Sent with every call: the daemon reads the principal from it.
        self.metadata = bearer_metadata(token)

    def _rpc(self, fn: Any, request: Any, timeout: float | None = None) -> Any:
        try:
            return fn(request, timeout=timeout, metadata=self.metadata)
        except grpc.RpcError as exc:
            raise error_of(exc) from exc

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def create_session(self, **fields: Any) -> pb.Session:
        return self._rpc(self.stub.CreateSession, pb.CreateSessionRequest(**fields), self.timeout)

    def session(self, **fields: Any) -> SessionHandle:
        """A session that is closed when the `with` block ends."""
        return SessionHandle(self, self.create_session(**fields))

    def get_session(self, session_id: str) -> pb.Session:
        return self._rpc(self.stub.GetSession, pb.GetSessionRequest(session_id=session_id))

    def list_sessions(self) -> list[pb.Session]:
        return list(self._rpc(self.stub.ListSessions, pb.ListSessionsRequest()).sessions)

    def close_session(self, session_id: str) -> str:
        reply = self._rpc(self.stub.CloseSession, pb.CloseSessionRequest(session_id=session_id))
        return str(reply.state)

    def admin_stats(self) -> pb.AdminStatsResponse:
        """The daemon's state (an admin principal's call)."""
        return self._rpc(self.stub.AdminStats, pb.AdminStatsRequest(), self.timeout)

    def admin_sessions(self, tenant: str = "", usage: bool = False) -> list[pb.AdminSession]:
        """Every tenant's open sessions (or `tenant`'s), with CPU and memory when `usage`."""
        request = pb.AdminListSessionsRequest(tenant=tenant, usage=usage)
        return list(self._rpc(self.stub.AdminListSessions, request, self.timeout).sessions)

    def list_tools(self, dialect: str = "", session_id: str = "") -> list[dict[str, Any]]:
        """The catalog; with `session_id`, descriptions say that session's network."""
        request = pb.ListToolsRequest(dialect=dialect, session_id=session_id)
        reply = self._rpc(self.stub.ListTools, request)
        return list(json.loads(reply.tools_json))

    def call(
        self,
        session_id: str,
        tool: str,
        arguments: dict[str, Any] | str,
        call_id: str = "",
        timeout: float | None = None,
    ) -> Result:
        """One call; `timeout` is the RPC deadline (the daemon then stops the call)."""
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        call = pb.ToolCall(id=call_id or uuid.uuid4().hex, name=tool, arguments_json=text)
        request = pb.ExecuteRequest(session_id=session_id, call=call)
        return Result.from_pb(self._rpc(self.stub.Execute, request, timeout))

    def execute_message(
        self, session_id: str, dialect: str, message: Any
    ) -> tuple[Any, list[Result]]:
        """Run every tool call in a provider message (a dict/list or its JSON text).

        Returns what to append to the conversation (the provider's shape) and
        the neutral results, one per call in order.
        """
        text = message if isinstance(message, str) else json.dumps(message)
        request = pb.ExecuteMessageRequest(
            session_id=session_id, dialect=dialect, message_json=text
        )
        reply = self._rpc(self.stub.ExecuteMessage, request, self.timeout)
        return json.loads(reply.results_json), [Result.from_pb(r) for r in reply.results]

    def stream(
        self, session_id: str, tool: str, arguments: dict[str, Any], call_id: str = ""
    ) -> Iterator[tuple[str, bytes] | Result]:
        """Yields ("stdout"|"stderr", chunk) as output arrives, then the Result."""
        call = pb.ToolCall(
            id=call_id or uuid.uuid4().hex, name=tool, arguments_json=json.dumps(arguments)
        )
        events = self.stub.ExecuteStream(
            pb.ExecuteRequest(session_id=session_id, call=call), metadata=self.metadata
        )
        try:
            for event in events:
                kind = event.WhichOneof("event")
                if kind == "result":
                    yield Result.from_pb(event.result)
                elif kind is not None:
                    yield kind, getattr(event, kind)
        except grpc.RpcError as exc:
            raise error_of(exc) from exc
        finally:
            # A caller that stops reading (Ctrl-C, break) stops the call too.
            events.cancel()

    def upload(self, session_id: str, tar: bytes, path: str = WORKSPACE) -> tuple[int, int]:
        """Unpack a tar archive below `path` in the sandbox; (files, bytes)."""

        def chunks() -> Iterator[pb.UploadFilesRequest]:
            yield pb.UploadFilesRequest(session_id=session_id, path=path, tar=tar[:UPLOAD_CHUNK])
            for start in range(UPLOAD_CHUNK, len(tar), UPLOAD_CHUNK):
                yield pb.UploadFilesRequest(tar=tar[start : start + UPLOAD_CHUNK])

        reply = self._rpc(self.stub.UploadFiles, chunks(), self.timeout)
        return int(reply.files), int(reply.bytes)

    # -- snapshots (files and shell state, never processes) -------------------
    def snapshot(self, session_id: str, label: str = "", include_tmp: bool = False) -> pb.Snapshot:
        """Keep the session's /workspace (and /tmp), cwd and persisted env."""
        request = pb.SnapshotSessionRequest(
            session_id=session_id, label=label, include_tmp=include_tmp
        )
        return self._rpc(self.stub.SnapshotSession, request, self.timeout)

    def fork(self, source: str, count: int = 1) -> list[SessionHandle]:
        """`count` new sessions from a live session or a snapshot ("snap_…"), all or none."""
        if source.startswith(SNAPSHOT_PREFIX):
            request = pb.ForkSessionRequest(snapshot_id=source, count=count)
        else:
            request = pb.ForkSessionRequest(session_id=source, count=count)
        reply = self._rpc(self.stub.ForkSession, request, self.timeout)
        return [SessionHandle(self, s) for s in reply.sessions]

    def restore(self, session_id: str, snapshot_id: str) -> pb.RestoreSessionResponse:
        """Roll the session back to the snapshot in place (its background processes stop)."""
        request = pb.RestoreSessionRequest(session_id=session_id, snapshot_id=snapshot_id)
        return self._rpc(self.stub.RestoreSession, request, self.timeout)

    def list_snapshots(self) -> list[pb.Snapshot]:
        return list(self._rpc(self.stub.ListSnapshots, pb.ListSnapshotsRequest()).snapshots)

    def delete_snapshot(self, snapshot_id: str) -> None:
        self._rpc(self.stub.DeleteSnapshot, pb.DeleteSnapshotRequest(snapshot_id=snapshot_id))

    def download(self, session_id: str, paths: list[str]) -> bytes:
        """A tar archive of sandbox `paths`, each stored under its base name."""
        request = pb.DownloadFilesRequest(session_id=session_id, paths=paths)
        try:
            chunks = self.stub.DownloadFiles(request, timeout=self.timeout, metadata=self.metadata)
            return b"".join(c.tar for c in chunks)
        except grpc.RpcError as exc:
            raise error_of(exc) from exc


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

    def call(self, tool: str, arguments: dict[str, Any] | str, call_id: str = "") -> Result:
        return self.client.call(self.id, tool, arguments, call_id)

    def execute_message(self, dialect: str, message: Any) -> tuple[Any, list[Result]]:
        return self.client.execute_message(self.id, dialect, message)

    def shell(self, command: str, **arguments: Any) -> Result:
        return self.call("shell", {"command": command, **arguments})

    def upload(self, tar: bytes, path: str = WORKSPACE) -> tuple[int, int]:
        return self.client.upload(self.id, tar, path)

    def download(self, paths: list[str]) -> bytes:
        return self.client.download(self.id, paths)

    def snapshot(self, label: str = "", include_tmp: bool = False) -> pb.Snapshot:
        return self.client.snapshot(self.id, label, include_tmp)

    def fork(self, count: int = 1) -> list[SessionHandle]:
        return self.client.fork(self.id, count)

    def restore(self, snapshot_id: str) -> list[str]:
        """Roll back to `snapshot_id`; the ids of the background processes stopped."""
        return list(self.client.restore(self.id, snapshot_id).stopped_process_ids)
