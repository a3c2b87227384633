"""Sessions in the state database: what a restarted daemon needs to re-adopt them.

A session's record is written when it is created (before CreateSession
answers), after every call that changed what it remembers (its call count,
its last use, the shell's directory and exports), and when it closes (state
`closed`, the reason, the time). Closed records are kept `CLOSED_KEEP_S`
so that GetSession can say why a session went away and CloseSession stays
idempotent across restarts; then they are purged.

Secret values are never stored: the record keeps their names, and the
daemon takes the values from its secrets_file again.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from runtime.state.db import Component, StateDB

# DESIGN: closed sessions are remembered for an hour.
CLOSED_KEEP_S = 3600.0

# closed_reason values (DESIGN, also the `reason` label of sessions_closed_total).
REASON_CLOSED = "closed"
REASON_TTL = "ttl"
REASON_IDLE = "idle"
REASON_LOST = "sandbox_lost"
REASON_SHUTDOWN = "shutdown"

SESSIONS = Component(
    "sessions",
    [
        """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            tenant TEXT NOT NULL,
            state TEXT NOT NULL,
            created_at REAL NOT NULL,
            last_used_at REAL NOT NULL,
            calls INTEGER NOT NULL DEFAULT 0,
            spec TEXT NOT NULL,
            tool_state TEXT NOT NULL DEFAULT '{}',
            closed_reason TEXT NOT NULL DEFAULT '',
            closed_at REAL NOT NULL DEFAULT 0
        );
        CREATE INDEX sessions_state ON sessions (state, closed_at)
        """
    ],
)


@dataclass
class SessionRecord:
    """A session as stored: everything but its sandbox and secret values."""

    id: str
    tenant: str
    state: str
    created_at: float
    last_used_at: float
    # What CreateSession settled on: image, runtime, limits (a Limits dump),
    # allowlist (read_roots, write_roots, deny_globs), network (allow texts
    # and caps), env, labels, secret names, ttl_seconds, idle_seconds.
    spec: dict[str, Any] = field(default_factory=dict)
    calls: int = 0
    # Per-tool state (tools.shell_state's dump): the shell's cwd and exports.
    tool_state: dict[str, Any] = field(default_factory=dict)
    closed_reason: str = ""
    closed_at: float = 0.0


_COLUMNS = (
    "id, tenant, state, created_at, last_used_at, calls, spec, tool_state, closed_reason, closed_at"
)


def _record(row: tuple[Any, ...]) -> SessionRecord:
    sid, tenant, state, created, used, calls, spec, tool_state, reason, closed_at = row
    return SessionRecord(
        sid, tenant, state, created, used, json.loads(spec), calls, json.loads(tool_state),
        reason, closed_at,
    )  # fmt: skip


class SessionStore:
    """The `sessions` table; every method is one transaction (call it on the
    state's writer thread, see `state.durable.Durable`)."""

    def __init__(self, db: StateDB) -> None:
        self._db = db

    def save(self, record: SessionRecord) -> None:
        data = asdict(record)
        with self._db.lock:
            self._db.conn.execute(
                f"INSERT OR REPLACE INTO sessions ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    data["id"],
                    data["tenant"],
                    data["state"],
                    data["created_at"],
                    data["last_used_at"],
                    data["calls"],
                    json.dumps(data["spec"]),
                    json.dumps(data["tool_state"]),
                    data["closed_reason"],
                    data["closed_at"],
                ),
            )

    def touch(self, session_id: str, calls: int, last_used_at: float, tool_state: str) -> None:
        """What a call changed: the count, the last use, the tools' state (JSON)."""
        with self._db.lock:
            self._db.conn.execute(
                "UPDATE sessions SET calls = ?, last_used_at = ?, tool_state = ? WHERE id = ?",
                (calls, last_used_at, tool_state, session_id),
            )

    def close(self, session_id: str, reason: str, when: float) -> None:
        """Mark it closed (the journal's rows go with it, see JournalStore.drop)."""
        with self._db.lock:
            self._db.conn.execute(
                "UPDATE sessions SET state = 'closed', closed_reason = ?, closed_at = ? "
                "WHERE id = ? AND state != 'closed'",
                (reason, when, session_id),
            )

    def delete(self, session_id: str) -> None:
        with self._db.lock:
            self._db.conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))

    def open_records(self) -> list[SessionRecord]:
        """Sessions that were not closed when the daemon last stopped."""
        with self._db.lock:
            rows = self._db.conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE state != 'closed'"
            ).fetchall()
        return [_record(row) for row in rows]

    def closed_record(self, session_id: str, now: float | None = None) -> SessionRecord | None:
        """The session if it closed within the last CLOSED_KEEP_S."""
        since = (time.time() if now is None else now) - CLOSED_KEEP_S
        with self._db.lock:
            row = self._db.conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE id = ? AND state = 'closed' "
                "AND closed_at >= ?",
                (session_id, since),
            ).fetchone()
        return _record(row) if row else None

    def purge_closed(self, now: float | None = None) -> int:
        since = (time.time() if now is None else now) - CLOSED_KEEP_S
        with self._db.lock:
            cursor = self._db.conn.execute(
                "DELETE FROM sessions WHERE state = 'closed' AND closed_at < ?", (since,)
            )
        return cursor.rowcount
