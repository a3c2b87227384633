"""Every proto ↔ domain conversion, in one module."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.admin import SessionView, Stats
from runtime.config import Limits
from runtime.egress.service import NetworkRequest
from runtime.errors import BadRequest
from runtime.models import ToolCall, ToolResult
from runtime.policy.allowlist import Allowlist, PathPolicy
from runtime.sessions.manager import SessionRequest
from runtime.sessions.session import Session
from runtime.sessions.views import SessionInfo, info_of
from runtime.snapshots.store import Snapshot


def limits_from_pb(msg: pb.Limits) -> Limits:
    return Limits.model_construct(
        memory_bytes=max(0, msg.memory_bytes),
        cpus=max(0.0, msg.cpus),
        pids=max(0, msg.pids),
        workspace_bytes=max(0, msg.workspace_bytes),
        tmp_bytes=max(0, msg.tmp_bytes),
        call_timeout_s=max(0.0, msg.call_timeout_s),
        max_calls=max(0, msg.max_calls),
        output_cap_bytes=max(0, msg.output_cap_bytes),
    )


def limits_to_pb(limits: Limits) -> pb.Limits:
    return pb.Limits(**limits.model_dump())


def allowlist_from_pb(msg: pb.Allowlist) -> Allowlist | None:
    if not (msg.read_roots or msg.write_roots or msg.deny_globs):
        return None
    return Allowlist(list(msg.read_roots), list(msg.write_roots), list(msg.deny_globs))


def allowlist_to_pb(allowlist: PathPolicy) -> pb.Allowlist:
    return pb.Allowlist(
        read_roots=allowlist.read_roots,
        write_roots=allowlist.write_roots,
        deny_globs=allowlist.deny_globs,
    )


def network_from_pb(msg: pb.NetworkPolicy) -> NetworkRequest | None:
    if not msg.allow:
        return None
    return NetworkRequest(
        allow=list(msg.allow),
        max_bytes=max(0, msg.max_bytes),
        max_connections=max(0, msg.max_connections),
    )


def session_request_from_pb(msg: pb.CreateSessionRequest) -> SessionRequest:
    return SessionRequest(
        image=msg.image,
        limits=limits_from_pb(msg.limits),
        allowlist=allowlist_from_pb(msg.allowlist),
        env=dict(msg.env),
        ttl_seconds=max(0, msg.ttl_seconds),
        idle_seconds=max(0, msg.idle_seconds),
        labels=dict(msg.labels),
        workspace_tar=msg.workspace_tar,
        secrets=list(msg.secrets),
        network=network_from_pb(msg.network),
        runtime=msg.runtime,
        users=list(msg.users),
        root_filesystem=msg.root_filesystem,
    )


def session_to_pb(session: Session) -> pb.Session:
    return info_to_pb(info_of(session))


def info_to_pb(info: SessionInfo) -> pb.Session:
    """A session as a client sees it, live or closed."""
    return pb.Session(
        id=info.id,
        state=info.state,
        image=info.image,
        limits=limits_to_pb(info.limits),
        allowlist=allowlist_to_pb(info.allowlist),
        created_at=info.created_at,
        expires_at=info.expires_at,
        labels=info.labels,
        calls=info.calls,
        ttl_seconds=info.ttl_seconds,
        idle_seconds=info.idle_seconds,
        tenant=info.tenant,
        secrets=info.secrets,
        network=pb.NetworkPolicy(
            allow=info.network.allow,
            max_bytes=info.network.max_bytes,
            max_connections=info.network.max_connections,
        ),
        runtime=info.runtime,
        closed_reason=info.closed_reason,
        users=info.users,
        root_filesystem=info.root_filesystem,
    )


def call_from_pb(msg: pb.ToolCall) -> ToolCall:
    return ToolCall(id=msg.id, name=msg.name, arguments_json=msg.arguments_json)


def result_to_pb(result: ToolResult) -> pb.ToolResult:
    msg = pb.ToolResult(
        call_id=result.call_id,
        ok=result.ok,
        output_json=result.output_json,
        duration_ms=result.duration_ms,
    )
    if result.error is not None:
        msg.error.code = result.error.code
        msg.error.message = result.error.message
        msg.error.retryable = result.error.retryable
    return msg


async def upload_from_pb(
    requests: AsyncIterator[pb.UploadFilesRequest],
) -> tuple[str, str, AsyncGenerator[bytes, None]]:
    """(session id, destination, the archive's chunks) of a client-streamed
    upload. Only the first message is read here: it names the session, so
    the session is checked before the rest of the archive is taken in."""
    first = await anext(requests, None)
    if first is None or not first.session_id:
        text = "UploadFilesRequest.session_id must be set on the first message"
        raise BadRequest(text)

    async def chunks() -> AsyncGenerator[bytes, None]:
        if first.tar:
            yield first.tar
        async for msg in requests:
            if msg.tar:
                yield msg.tar

    return first.session_id, first.path, chunks()


def admin_stats_to_pb(stats: Stats) -> pb.AdminStatsResponse:
    return pb.AdminStatsResponse(
        version=stats.version,
        instance=stats.instance,
        started_at=stats.started_at,
        uptime_seconds=stats.uptime_seconds,
        engine=stats.engine,
        engine_error=stats.engine_error,
        runtime=stats.runtime,
        sessions=stats.sessions,
        max_sessions=stats.max_sessions,
        sessions_created=stats.created,
        sessions_closed=stats.closed,
        pool=[
            pb.PoolProfileStats(
                image=p.image,
                workspace_bytes=p.workspace_bytes,
                tmp_bytes=p.tmp_bytes,
                ready=p.ready,
                filling=p.filling,
                target=p.target,
            )
            for p in stats.pool
        ],
        calls_per_second=stats.calls_per_second,
        calls_total=stats.calls_total,
        errors=stats.errors,
        healthy=stats.healthy,
    )


def admin_session_to_pb(view: SessionView) -> pb.AdminSession:
    return pb.AdminSession(
        session=session_to_pb(view.session),
        last_tool=view.session.last_tool,
        last_used_at=view.last_used_at,
        active_calls=view.session.active_calls,
        cpu_seconds=view.usage.cpu_seconds,
        memory_bytes=view.usage.memory_bytes,
    )


def snapshot_to_pb(snapshot: Snapshot) -> pb.Snapshot:
    return pb.Snapshot(
        id=snapshot.id,
        session_id=snapshot.session_id,
        label=snapshot.label,
        created_at=snapshot.created_at,
        expires_at=snapshot.expires_at,
        bytes=snapshot.bytes,
        files=snapshot.files,
    )
