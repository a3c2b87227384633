"""What the synchronous and the async client both need, defined once.

How a client reaches the daemon (target, token, TLS, from arguments or the
`TOOLRT_*` variables), how an RPC's failure becomes `ToolrtRpcError`, and
every request each client sends with the reading of its answer (`Unary`):
`Client` (sdk.py) and `AsyncClient` (aio.py) only differ in how they wait.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import grpc

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime._proto.toolruntime.v1 import runtime_pb2_grpc as pb_grpc
from runtime.client.errors import ToolrtRpcError, rpc_errors
from runtime.constants import DEFAULT_TARGET

UPLOAD_CHUNK = 1 << 20
# Snapshot ids start with it; session ids never do.
SNAPSHOT_PREFIX = "snap_"
Metadata = tuple[tuple[str, str], ...]
Arguments = dict[str, Any] | str
T = TypeVar("T")
__all__ = ["TLS", "Connected", "Result", "ToolrtRpcError", "Unary", "rpc_errors"]


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

    @classmethod
    def from_env(cls) -> TLS | None:
        """TLS from TOOLRT_TLS_CA/_CERT/_KEY (as the CLI reads them); None when unset."""
        ca, cert, key = (os.environ.get(f"TOOLRT_TLS_{n}", "") for n in ("CA", "CERT", "KEY"))
        return cls(ca_file=ca, cert_file=cert, key_file=key) if ca or cert or key else None

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path: str) -> bytes | None:
            if not path:
                return None
            with open(path, "rb") as f:
                return f.read()

        return grpc.ssl_channel_credentials(
            read(self.ca_file), read(self.key_file), read(self.cert_file)
        )


@dataclass(frozen=True)
class Connection:
    """Where and how a client connects; `credentials` None is plaintext."""

    target: str
    credentials: grpc.ChannelCredentials | None
    options: list[tuple[str, Any]]
    # Sent with every call: the daemon reads the principal from it.
    metadata: Metadata

    def channel(self, api: Any) -> Any:
        """A channel of `api` (the module grpc, or grpc.aio) to the target."""
        if self.credentials is None:
            return api.insecure_channel(self.target, options=self.options)
        return api.secure_channel(self.target, self.credentials, options=self.options)


def connection(
    target: str | None,
    token: str | None,
    tls: bool | TLS | grpc.ChannelCredentials | None,
) -> Connection:
    """Arguments first, else TOOLRT_TARGET, TOOLRT_TOKEN and TOOLRT_TLS_* (tls=False: plaintext)."""
    target = target or os.environ.get("TOOLRT_TARGET") or DEFAULT_TARGET
    token = os.environ.get("TOOLRT_TOKEN", "") if token is None else token
    if tls is None:
        tls = TLS.from_env()
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", 64 << 20),
        ("grpc.max_send_message_length", 64 << 20),
    ]
    if isinstance(tls, TLS) and tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    credentials: grpc.ChannelCredentials | None
    if tls is None or tls is False:
        credentials = None
    elif tls is True:
        credentials = grpc.ssl_channel_credentials()
    elif isinstance(tls, TLS):
        credentials = tls.credentials()
    else:
        credentials = tls
    return Connection(target, credentials, options, bearer_metadata(token))


class Connected:
    """What both clients hold: a channel of `api` (grpc or grpc.aio), its stub,
    the default deadline and the metadata sent with every call."""

    api: Any
    channel: Any

    def __init__(
        self,
        target: str | None = None,
        timeout: float | None = None,
        *,
        token: str | None = None,
        tls: bool | TLS | grpc.ChannelCredentials | None = None,
    ) -> None:
        how = connection(target, token, tls)
        self.channel = how.channel(self.api)
        self.stub = pb_grpc.ToolRuntimeStub(self.channel)
        self.timeout = timeout
        self.metadata = how.metadata


# -- requests and the reading of their answers ---------------------------------


@dataclass(frozen=True)
class Unary(Generic[T]):
    """One unary RPC: the stub's method name, its request, how to read the reply."""

    method: str
    request: Any
    read: Callable[[Any], T]


def streamed(call: Any, read: Callable[[Any], T]) -> Iterator[T]:
    """What `read` takes from each message of a server stream, as they
    arrive; leaving early cancels the RPC."""
    try:
        with rpc_errors():
            for message in call:
                yield read(message)
    finally:
        call.cancel()


def _same(reply: T) -> T:
    return reply


def tool_call(tool: str, arguments: Arguments, call_id: str = "") -> pb.ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return pb.ToolCall(id=call_id or uuid.uuid4().hex, name=tool, arguments_json=text)


def create_session(**fields: Any) -> Unary[pb.Session]:
    return Unary("CreateSession", pb.CreateSessionRequest(**fields), _same)


def get_session(session_id: str) -> Unary[pb.Session]:
    return Unary("GetSession", pb.GetSessionRequest(session_id=session_id), _same)


def list_sessions() -> Unary[list[pb.Session]]:
    return Unary("ListSessions", pb.ListSessionsRequest(), lambda r: list(r.sessions))


def close_session(session_id: str) -> Unary[str]:
    request = pb.CloseSessionRequest(session_id=session_id)
    return Unary("CloseSession", request, lambda r: str(r.state))


def admin_stats() -> Unary[pb.AdminStatsResponse]:
    return Unary("AdminStats", pb.AdminStatsRequest(), _same)


def admin_sessions(tenant: str, usage: bool) -> Unary[list[pb.AdminSession]]:
    request = pb.AdminListSessionsRequest(tenant=tenant, usage=usage)
    return Unary("AdminListSessions", request, lambda r: list(r.sessions))


def list_tools(dialect: str, session_id: str) -> Unary[list[dict[str, Any]]]:
    request = pb.ListToolsRequest(dialect=dialect, session_id=session_id)
    return Unary("ListTools", request, lambda r: list(json.loads(r.tools_json)))


def execute_batch(session_id: str, calls: list[tuple[str, Arguments]]) -> Unary[list[Result]]:
    request = pb.ExecuteBatchRequest(
        session_id=session_id, calls=[tool_call(tool, args) for tool, args in calls]
    )
    return Unary("ExecuteBatch", request, lambda r: [Result.from_pb(x) for x in r.results])


def execute_message(session_id: str, dialect: str, message: Any) -> Unary[tuple[Any, list[Result]]]:
    text = message if isinstance(message, str) else json.dumps(message)
    request = pb.ExecuteMessageRequest(session_id=session_id, dialect=dialect, message_json=text)
    return Unary(
        "ExecuteMessage",
        request,
        lambda r: (json.loads(r.results_json), [Result.from_pb(x) for x in r.results]),
    )


def snapshot(session_id: str, label: str, include_tmp: bool) -> Unary[pb.Snapshot]:
    request = pb.SnapshotSessionRequest(session_id=session_id, label=label, include_tmp=include_tmp)
    return Unary("SnapshotSession", request, _same)


def fork(source: str, count: int) -> Unary[list[pb.Session]]:
    """`count` sessions from a live session or a snapshot ("snap_…")."""
    if source.startswith(SNAPSHOT_PREFIX):
        request = pb.ForkSessionRequest(snapshot_id=source, count=count)
    else:
        request = pb.ForkSessionRequest(session_id=source, count=count)
    return Unary("ForkSession", request, lambda r: list(r.sessions))


def restore(session_id: str, snapshot_id: str) -> Unary[pb.RestoreSessionResponse]:
    request = pb.RestoreSessionRequest(session_id=session_id, snapshot_id=snapshot_id)
    return Unary("RestoreSession", request, _same)


def list_snapshots() -> Unary[list[pb.Snapshot]]:
    return Unary("ListSnapshots", pb.ListSnapshotsRequest(), lambda r: list(r.snapshots))


def delete_snapshot(snapshot_id: str) -> Unary[None]:
    request = pb.DeleteSnapshotRequest(snapshot_id=snapshot_id)
    return Unary("DeleteSnapshot", request, lambda _: None)


def read_upload(reply: pb.UploadFilesResponse) -> tuple[int, int]:
    """(files, bytes) an upload unpacked."""
    return int(reply.files), int(reply.bytes)


def upload_head(session_id: str, path: str) -> pb.UploadFilesRequest:
    """An upload's first message: it names the session and the directory
    (the daemon checks the session before it takes in the archive)."""
    return pb.UploadFilesRequest(session_id=session_id, path=path)


def upload_pieces(chunk: bytes) -> Iterator[pb.UploadFilesRequest]:
    """The messages carrying one chunk of the archive, none over UPLOAD_CHUNK."""
    for start in range(0, len(chunk), UPLOAD_CHUNK):
        yield pb.UploadFilesRequest(tar=chunk[start : start + UPLOAD_CHUNK])


def stream_request(session_id: str, tool: str, arguments: Arguments, call_id: str) -> Any:
    return pb.ExecuteRequest(session_id=session_id, call=tool_call(tool, arguments, call_id))


def execute(session_id: str, tool: str, arguments: Arguments, call_id: str) -> Unary[Result]:
    return Unary("Execute", stream_request(session_id, tool, arguments, call_id), Result.from_pb)


def stream_item(event: pb.ExecuteEvent) -> tuple[str, bytes] | Result | None:
    """("stdout"|"stderr", chunk) or the Result an ExecuteStream event carries."""
    kind = event.WhichOneof("event")
    if kind == "result":
        return Result.from_pb(event.result)
    if kind is None:
        return None
    return kind, getattr(event, kind)
