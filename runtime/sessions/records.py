"""A Session and its stored record, each made from the other.

What is stored is what a restarted daemon needs to serve the session again
on its re-attached sandbox: its settings as CreateSession settled them, its
clocks (wall-clock times: monotonic ones do not survive a restart), its call
count and its tools' state. Secret values are not: the names are, and the
values come from secrets_file again.
"""

from __future__ import annotations

import json
import time

from runtime.agent.redact import Redactor
from runtime.config import Limits
from runtime.policy.allowlist import PathPolicy
from runtime.policy.hosts import NetworkPolicy, parse_patterns
from runtime.sandbox.backend import Sandbox
from runtime.sessions.journal import Journal
from runtime.sessions.session import READY, Session
from runtime.state.sessions import SessionRecord
from runtime.tools.shell_state import dump_tool_state, load_tool_state


def wall_of(monotonic: float) -> float:
    """A monotonic instant of this process as wall-clock time."""
    return time.time() - (time.monotonic() - monotonic)


def monotonic_of(wall: float) -> float:
    """A wall-clock instant as this process's monotonic time (never in the future)."""
    return time.monotonic() - max(0.0, time.time() - wall)


def tool_state_json(session: Session) -> str:
    return json.dumps(dump_tool_state(session.tool_state), separators=(",", ":"))


def record_of(session: Session) -> SessionRecord:
    policy = session.allowlist
    return SessionRecord(
        id=session.id,
        tenant=session.tenant,
        state=session.state,
        created_at=session.created_at,
        last_used_at=wall_of(session.last_used),
        spec={
            "image": session.image,
            "runtime": session.runtime,
            "limits": session.limits.model_dump(),
            "allowlist": [
                list(policy.read_roots),
                list(policy.write_roots),
                list(policy.deny_globs),
            ],
            "network": {
                "allow": session.network.allow_texts(),
                "max_bytes": session.network.max_bytes,
                "max_connections": session.network.max_connections,
            },
            "env": session.env,
            "labels": session.labels,
            "secrets": session.secrets,
            "ttl_seconds": session.ttl_seconds,
            "idle_seconds": session.idle_seconds,
            "users": session.users,
            "root_capabilities": session.root_capabilities,
            "root_filesystem": session.root_filesystem,
        },
        calls=session.calls,
        tool_state=dump_tool_state(session.tool_state),
        closed_reason=session.closed_reason,
    )


def session_of(
    record: SessionRecord, sandbox: Sandbox, journal: Journal, secrets: dict[str, str]
) -> Session:
    """The live session of a re-adopted sandbox; `secrets` are secrets_file's values."""
    spec = record.spec
    network = spec.get("network") or {}
    read, write, deny = spec.get("allowlist") or [[], [], []]
    names = [name for name in spec.get("secrets", []) if name in secrets]
    return Session(
        id=record.id,
        tenant=record.tenant,
        image=spec["image"],
        limits=Limits.model_validate(spec["limits"]),
        allowlist=PathPolicy(tuple(read), tuple(write), tuple(deny)),
        env=dict(spec.get("env") or {}),
        labels=dict(spec.get("labels") or {}),
        sandbox=sandbox,
        ttl_seconds=float(spec.get("ttl_seconds", 0)),
        idle_seconds=float(spec.get("idle_seconds", 0)),
        network=NetworkPolicy(
            allow=parse_patterns(network.get("allow", []), "network.allow"),
            max_bytes=int(network.get("max_bytes", 0)),
            max_connections=int(network.get("max_connections", 0)),
        ),
        runtime=spec.get("runtime", ""),
        created_at=record.created_at,
        last_used=monotonic_of(record.last_used_at),
        state=READY,
        calls=record.calls,
        tool_state=load_tool_state(record.tool_state),
        journal=journal,
        secrets=list(spec.get("secrets", [])),
        redactor=Redactor({name: secrets[name] for name in names}),
        users=list(spec.get("users") or []),
        root_capabilities=bool(spec.get("root_capabilities", False)),
        root_filesystem=spec.get("root_filesystem") or "read-only",
    )
