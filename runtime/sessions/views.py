"""A session as a client sees it (GetSession, ListSessions, CreateSession's
answer), whatever its state: live, closing, or closed and known only by its
stored record. The fronts convert this one shape; none reads a record."""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.config import Limits
from runtime.policy.allowlist import PathPolicy
from runtime.sessions.session import Session
from runtime.state.sessions import SessionRecord


@dataclass(frozen=True)
class NetworkView:
    allow: list[str] = field(default_factory=list)
    max_bytes: int = 0
    max_connections: int = 0


@dataclass(frozen=True)
class SessionInfo:
    id: str
    tenant: str
    state: str
    image: str
    runtime: str
    limits: Limits
    allowlist: PathPolicy
    network: NetworkView
    labels: dict[str, str]
    secrets: list[str]
    created_at: float
    # 0: no TTL.
    expires_at: float
    ttl_seconds: float
    idle_seconds: float
    calls: int
    closed_reason: str
    users: list[str]
    root_filesystem: str


def info_of(session: Session) -> SessionInfo:
    """A live (or closing) session as its client sees it."""
    return SessionInfo(
        id=session.id,
        tenant=session.tenant,
        state=session.state,
        image=session.image,
        runtime=session.runtime,
        limits=session.limits,
        allowlist=session.allowlist,
        network=NetworkView(
            session.network.allow_texts(),
            session.network.max_bytes,
            session.network.max_connections,
        ),
        labels=session.labels,
        secrets=session.secrets,
        created_at=session.created_at,
        expires_at=session.expires_at,
        ttl_seconds=session.ttl_seconds,
        idle_seconds=session.idle_seconds,
        calls=session.calls,
        closed_reason=session.closed_reason,
        users=session.users,
        root_filesystem=session.root_filesystem,
    )


def info_of_record(record: SessionRecord) -> SessionInfo:
    """A closed session as its stored record tells it."""
    spec = record.spec
    network = spec.get("network") or {}
    read, write, deny = spec.get("allowlist") or [[], [], []]
    ttl = float(spec.get("ttl_seconds", 0))
    return SessionInfo(
        id=record.id,
        tenant=record.tenant,
        state=record.state,
        image=spec.get("image", ""),
        runtime=spec.get("runtime", ""),
        limits=Limits.model_validate(spec["limits"]),
        allowlist=PathPolicy(tuple(read), tuple(write), tuple(deny)),
        network=NetworkView(
            network.get("allow", []),
            network.get("max_bytes", 0),
            network.get("max_connections", 0),
        ),
        labels=spec.get("labels") or {},
        secrets=spec.get("secrets") or [],
        created_at=record.created_at,
        expires_at=record.created_at + ttl if ttl else 0.0,
        ttl_seconds=ttl,
        idle_seconds=float(spec.get("idle_seconds", 0)),
        calls=record.calls,
        closed_reason=record.closed_reason,
        users=list(spec.get("users") or []),
        root_filesystem=spec.get("root_filesystem") or "read-only",
    )
