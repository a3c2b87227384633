"""One SQLite database under `state_dir`, with versioned schemas per component.

Each component (sessions, the call journal, snapshots…) owns its tables and
an ordered list of migrations; the `schema` table records how far each one
got. Components are versioned apart so that their schemas evolve without a
global migration number every change would fight over.

Opening refuses, with the path and what to do, a file that is not a SQLite
database, one whose integrity check fails, and one a newer toolrt wrote (a
component version above the migrations this build knows): never a silent
reset of state an operator may need.

WAL mode, one connection, used by one writer at a time (callers serialise
through `StateDB.lock` or run on one thread). `synchronous=NORMAL`: in WAL
mode a commit that returned survives any crash of the daemon's process
(kill -9, OOM, a bug) without an fsync per commit, which cost about 1.9 ms a
call; what it may lose is the last commits before a crash of the host, and
a host crash takes every sandbox down with it, so the sessions those
records describe are lost either way.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigurationError

FILE_NAME = "state.sqlite3"


@dataclass(frozen=True)
class Component:
    """A component's schema: migration i (0-based) takes version i to i + 1."""

    name: str
    migrations: Sequence[str]

    @property
    def version(self) -> int:
        return len(self.migrations)


class StateError(ConfigurationError):
    """The state database cannot be used; the message names the path."""


def default_state_dir(instance: str) -> str:
    """DESIGN: /var/lib/toolrt/<instance> for root, else under XDG_STATE_HOME."""
    if os.geteuid() == 0:
        return os.path.join("/var/lib/toolrt", instance)
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return os.path.join(base, "toolrt", instance)


class StateDB:
    """The open database; `conn` for queries, `lock` around each transaction."""

    def __init__(self, path: str, conn: sqlite3.Connection) -> None:
        self.path = path
        self.conn = conn
        self.lock = threading.RLock()

    @classmethod
    def open(cls, state_dir: str, components: Sequence[Component]) -> StateDB:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        path = os.path.join(state_dir, FILE_NAME)
        try:
            conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA busy_timeout=5000")
            ok = conn.execute("PRAGMA quick_check").fetchone()
        except sqlite3.DatabaseError as exc:
            msg = (
                f"state database {path} is unreadable ({exc}); move it aside to start "
                "with no state, or restore it from a backup"
            )
            raise StateError(msg) from exc
        if not ok or ok[0] != "ok":
            conn.close()
            msg = (
                f"state database {path} fails its integrity check ({ok}); "
                "move it aside or restore it from a backup"
            )
            raise StateError(msg)
        db = cls(path, conn)
        db._migrate(components)
        return db

    def _migrate(self, components: Sequence[Component]) -> None:
        with self.lock:
            try:
                self.conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema "
                    "(component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
                )
                known = dict(self.conn.execute("SELECT component, version FROM schema").fetchall())
            except sqlite3.DatabaseError as exc:
                msg = f"state database {self.path}: cannot read its schema ({exc})"
                raise StateError(msg) from exc
            for component in components:
                have = int(known.get(component.name, 0))
                if have > component.version:
                    msg = (
                        f"state database {self.path} was written by a newer toolrt "
                        f"({component.name} schema {have}, this build knows {component.version}); "
                        "run that version, or move the file aside to start with no state"
                    )
                    raise StateError(msg)
                for step in range(have, component.version):
                    self._apply(component, step)

    def _apply(self, component: Component, step: int) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(component.migrations[step]):
                self.conn.execute(statement)
            self.conn.execute(
                "INSERT INTO schema (component, version) VALUES (?, ?) "
                "ON CONFLICT(component) DO UPDATE SET version = excluded.version",
                (component.name, step + 1),
            )
            self.conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            self.conn.execute("ROLLBACK")
            msg = (
                f"state database {self.path}: migration {component.name} {step + 1} failed ({exc})"
            )
            raise StateError(msg) from exc

    def close(self) -> None:
        with self.lock:
            self.conn.close()


def _statements(script: str) -> list[str]:
    """Split a migration into statements (executescript would commit our
    transaction; migrations hold no semicolons inside literals)."""
    return [s.strip() for s in script.split(";") if s.strip()]
