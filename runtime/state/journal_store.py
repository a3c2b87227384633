"""The call journal in the state database: exactly once across restarts.

Every call's final result (`done`) is written before the answer is sent. A
call whose side effects the agent cannot vouch for (edit_file, process_kill)
also gets a `running` row before it starts, so a daemon that died meanwhile
answers its retry OUTCOME_UNKNOWN rather than run it twice. Read-only calls
need none (running one again is harmless), nor does a call naming no tool,
nor do commands and write_file: they go to the agent with their call id and
`resume`, and the agent, which keeps answers until they are acknowledged,
answers one it already ran instead of running it again.

Bounded like the in-memory journal: past `max_results` rows a session's
oldest results are dropped (the id and fingerprint stay, enough to refuse a
repeat), past `max_results + max_ids` the ids go too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from runtime.models import ToolErrorInfo, ToolResult
from runtime.state.db import Component, StateDB

RUNNING = "running"
DONE = "done"
# Results dropped by the bound: the id is remembered, the answer is not.
FORGOTTEN = "forgotten"
# Trimming costs two statements: due every this many results of a session.
TRIM_EVERY = 64

JOURNAL = Component(
    "journal",
    [
        """
        CREATE TABLE journal (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL,
            call_id TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            status TEXT NOT NULL,
            result TEXT,
            UNIQUE (session_id, call_id)
        );
        CREATE INDEX journal_session ON journal (session_id, seq)
        """
    ],
)


@dataclass(frozen=True)
class JournalRow:
    call_id: str
    fingerprint: str
    status: str
    result: ToolResult | None


def result_to_json(result: ToolResult) -> str:
    """The stored row: the output is the result's own `output_json`, the
    text the client was answered with, not encoded a second time."""
    error = None
    if result.error is not None:
        error = [result.error.code, result.error.message, result.error.retryable]
    head = {"id": result.call_id, "err": error, "ms": result.duration_ms}
    text = json.dumps(head, separators=(",", ":"))
    return f'{text[:-1]},"out":{result.output_json}}}'


def result_from_json(text: str) -> ToolResult:
    data: dict[str, Any] = json.loads(text)
    error = ToolErrorInfo(*data["err"]) if data.get("err") else None
    return ToolResult(data["id"], data["out"], error, int(data.get("ms", 0)))


class JournalStore:
    """The `journal` table; every method is one transaction."""

    def __init__(self, db: StateDB, max_results: int = 1024, max_ids: int = 20_000) -> None:
        self._db = db
        self._max_results = max(1, max_results)
        self._max_ids = max(0, max_ids)
        self._since_trim: dict[str, int] = {}

    def begin(self, session_id: str, call_id: str, fingerprint: str) -> None:
        with self._db.lock:
            self._db.conn.execute(
                "INSERT OR IGNORE INTO journal (session_id, call_id, fingerprint, status) "
                "VALUES (?, ?, ?, 'running')",
                (session_id, call_id, fingerprint),
            )

    def finish(self, session_id: str, call_id: str, fingerprint: str, result: ToolResult) -> bool:
        """Store the call's result; whether the session is due a `trim`."""
        with self._db.lock:
            self._db.conn.execute(
                "INSERT INTO journal (session_id, call_id, fingerprint, status, result) "
                "VALUES (?, ?, ?, 'done', ?) ON CONFLICT (session_id, call_id) "
                "DO UPDATE SET status = 'done', result = excluded.result",
                (session_id, call_id, fingerprint, result_to_json(result)),
            )
            count = self._since_trim.get(session_id, 0) + 1
            self._since_trim[session_id] = count
            if count < TRIM_EVERY:
                return False
            self._since_trim[session_id] = 0
            return True

    def trim(self, session_id: str) -> None:
        """Apply the bounds to the session's rows (milliseconds on a full
        journal: the daemon runs it apart from any call's commit)."""
        with self._db.lock:
            self._trim(session_id)

    def _trim(self, session_id: str) -> None:
        conn = self._db.conn
        conn.execute(
            "UPDATE journal SET status = 'forgotten', result = NULL WHERE session_id = ? "
            "AND status = 'done' AND seq <= (SELECT seq FROM journal WHERE session_id = ? "
            "ORDER BY seq DESC LIMIT 1 OFFSET ?)",
            (session_id, session_id, self._max_results),
        )
        conn.execute(
            "DELETE FROM journal WHERE session_id = ? AND seq <= (SELECT seq FROM journal "
            "WHERE session_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
            (session_id, session_id, self._max_results + self._max_ids),
        )

    def rows(self, session_id: str) -> list[JournalRow]:
        """The session's calls, oldest first (what a re-adopted session remembers)."""
        with self._db.lock:
            found = self._db.conn.execute(
                "SELECT call_id, fingerprint, status, result FROM journal "
                "WHERE session_id = ? ORDER BY seq",
                (session_id,),
            ).fetchall()
        return [
            JournalRow(cid, fp, status, result_from_json(res) if res else None)
            for cid, fp, status, res in found
        ]

    def drop(self, session_id: str) -> None:
        """Forget a closed session's calls."""
        self._since_trim.pop(session_id, None)
        with self._db.lock:
            self._db.conn.execute("DELETE FROM journal WHERE session_id = ?", (session_id,))
