"""The daemon's durable state, for the event loop: sessions and the call journal.

Statements run on one writer thread (SQLite's one writer). A write that
fails (disk full, read-only file, a broken database) raises StateUnavailable
naming the path, so the work it was to record is refused (UNAVAILABLE,
retryable) rather than done without a trace; what was written before stays.

The journal's rows are group-committed: the rows of every call that asks
while the writer is busy go in its next transaction, one commit for all of
them, and each caller returns once that commit has (a result is never
answered before it is stored). Each row has a savepoint of its own, so a
row that fails fails its own call only.

A row that finds the writer idle (no round gathering, nobody holding the
database) is committed at once on the event loop instead: in WAL mode with
`synchronous=NORMAL` a commit appends to the log and waits for no fsync
(about 0.1 ms), less than the two hops to the writer thread and back it
saves. Not a large one (a result past `INLINE_COMMIT_BYTES`): copying
megabytes into the log would hold every other call. What does wait for
fsyncs, the checkpoint that copies the log into the database, never runs
there: SQLite's own (at commit, on whichever thread commits) is off, and
the writer thread checkpoints every `CHECKPOINT_EVERY` transactions. No
other process writes the database (the daemon holds state_dir's lock), so
an inline `BEGIN IMMEDIATE` never waits for one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from runtime.config import Config
from runtime.errors import StateUnavailable
from runtime.models import ToolResult
from runtime.state.db import StateDB
from runtime.state.group import GroupWriter
from runtime.state.journal_store import JOURNAL, JournalRow, JournalStore
from runtime.state.lock import StateLock
from runtime.state.sessions import SESSIONS, SessionRecord, SessionStore

log = logging.getLogger(__name__)
# The schemas of the tables behind `Durable`.
COMPONENTS = (SESSIONS, JOURNAL)
# Transactions between checkpoints: SQLite's default (1,000 log pages) is
# about 300 of the journal's commits; this keeps the log well under that.
CHECKPOINT_EVERY = 200
# Rows up to this size may be committed on the event loop (a fraction of a millisecond).
INLINE_COMMIT_BYTES = 256 << 10
T = TypeVar("T")


class Durable:
    """Async access to the sessions and journal tables of one StateDB (the
    composition root opens it with `COMPONENTS` among its schemas; closing
    this closes it)."""

    def __init__(self, db: StateDB, config: Config, lock: StateLock | None = None) -> None:
        self.db = db
        # Held while this daemon owns state_dir (None: a caller that owns it already).
        self._lock = lock
        self.sessions = SessionStore(db)
        self.journal = JournalStore(db, config.journal_max_results, config.journal_max_ids)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="state")
        self._closed = False
        # Why the latest write failed ("" once one succeeds again): while set,
        # every call is recorded as started first, so none runs unrecorded.
        self.broken = ""
        # The journal's rows, group-committed on the writer thread.
        self._group = GroupWriter(self._writer, self._commit)
        # Checkpoints run on the writer thread only (see the module's doc).
        db.conn.execute("PRAGMA wal_autocheckpoint=0")
        self._since_checkpoint = 0

    @property
    def path(self) -> str:
        return self.db.path

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        if self._closed:
            msg = f"state database {self.db.path} is closed (the daemon is stopping)"
            raise StateUnavailable(msg)
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(self._writer, fn, *args)
            self.broken = ""
            return result
        except sqlite3.Error as exc:
            raise self._unwritable(exc) from exc
        finally:
            self._wrote()

    def _unwritable(self, exc: sqlite3.Error) -> StateUnavailable:
        msg = (
            f"state database {self.db.path} cannot be written ({exc}); no new work is "
            "accepted until it can (free disk space, fix its permissions)"
        )
        log.error("%s", msg)
        self.broken = msg
        return StateUnavailable(msg)

    async def _grouped(self, write: Callable[[], None], size: int = 0) -> None:
        """`write` (of about `size` bytes) committed: at once on the loop if it
        is small and the writer idle, else in the next group commit; returns
        once it has committed."""
        if self._closed:
            msg = f"state database {self.db.path} is closed (the daemon is stopping)"
            raise StateUnavailable(msg)
        try:
            inline = size <= INLINE_COMMIT_BYTES and not self._group.pending
            if inline and self.db.lock.acquire(blocking=False):
                try:
                    failed = self._commit([write])[0]
                finally:
                    self.db.lock.release()
                if failed is not None:
                    raise failed
            else:
                await self._group.submit(write)
        except sqlite3.Error as exc:
            raise self._unwritable(exc) from exc
        finally:
            self._wrote()
        self.broken = ""

    def _wrote(self) -> None:
        """Count a transaction; every CHECKPOINT_EVERY, queue a checkpoint."""
        self._since_checkpoint += 1
        if self._since_checkpoint >= CHECKPOINT_EVERY:
            self._since_checkpoint = 0
            self._later("a checkpoint", self._checkpoint)

    def _checkpoint(self) -> None:
        """Copy the log into the database (the log keeps every commit until then)."""
        with self.db.lock:
            self.db.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _later(self, what: str, work: Callable[[], None]) -> None:
        """Upkeep on the writer thread, apart from any call: a failure is
        logged, and the next time it is due tries again."""
        if not self._closed:
            self._writer.submit(self._logged, what, work)

    def _logged(self, what: str, work: Callable[[], None]) -> None:
        try:
            work()
        except sqlite3.Error as exc:
            log.warning("state database %s: %s failed (%s)", self.db.path, what, exc)

    def _commit(self, writes: list[Callable[[], None]]) -> list[Exception | None]:
        """One transaction, a savepoint per row (holds the database's lock)."""
        with self._transaction():
            return [self._savepoint(write) for write in writes]

    def _savepoint(self, write: Callable[[], None]) -> Exception | None:
        """One row in the group's transaction: what it raised, its writes undone."""
        conn = self.db.conn
        conn.execute("SAVEPOINT row")
        try:
            write()
        except Exception as exc:  # noqa: BLE001 - handed to that row's caller
            conn.execute("ROLLBACK TO row")
            return exc
        finally:
            conn.execute("RELEASE row")
        return None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        with self.db.lock:
            self.db.conn.execute("BEGIN IMMEDIATE")
            try:
                yield
                self.db.conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    self.db.conn.execute("ROLLBACK")
                raise

    # -- sessions -----------------------------------------------------------
    async def save_session(self, record: SessionRecord) -> None:
        await self._run(self.sessions.save, record)

    async def touch_session(
        self, session_id: str, calls: int, last_used_at: float, tool_state: str
    ) -> None:
        await self._run(self.sessions.touch, session_id, calls, last_used_at, tool_state)

    async def close_session(self, session_id: str, reason: str, when: float) -> None:
        def both() -> None:
            with self._transaction():
                self.sessions.close(session_id, reason, when)
                self.journal.drop(session_id)

        await self._run(both)

    async def forget_sessions(self, which: Callable[[SessionRecord], bool]) -> set[str]:
        """Delete the open records `which` selects, journals included, as if
        never made (a fork's a crash cut short); their ids."""

        def delete() -> set[str]:
            ids = {r.id for r in self.sessions.open_records() if which(r)}
            with self._transaction():
                for session_id in ids:
                    self.sessions.delete(session_id)
                    self.journal.drop(session_id)
            return ids

        return await self._run(delete)

    async def open_records(self) -> list[SessionRecord]:
        return await self._run(self.sessions.open_records)

    async def closed_record(self, session_id: str) -> SessionRecord | None:
        return await self._run(self.sessions.closed_record, session_id)

    async def purge_closed(self) -> int:
        return await self._run(self.sessions.purge_closed)

    # -- the journal --------------------------------------------------------
    async def call_started(self, session_id: str, call_id: str, fingerprint: str) -> None:
        await self._grouped(lambda: self.journal.begin(session_id, call_id, fingerprint))

    async def call_finished(
        self,
        session_id: str,
        call_id: str,
        fingerprint: str,
        result: ToolResult,
        touch: tuple[int, float, str] | None = None,
    ) -> None:
        """The call's result and, in the same transaction, what it changed of
        its session (`touch`: calls, last use, tools' state as JSON)."""

        trim_due = False

        def both() -> None:
            nonlocal trim_due
            trim_due = self.journal.finish(session_id, call_id, fingerprint, result)
            if touch is not None:
                self.sessions.touch(session_id, *touch)

        await self._grouped(both, result.output_bytes)
        if trim_due:
            # Not in the call's commit: on a full journal it takes milliseconds.
            self._later("trimming the journal", lambda: self._trim(session_id))

    def _trim(self, session_id: str) -> None:
        with self._transaction():
            self.journal.trim(session_id)

    async def journal_rows(self, session_id: str) -> list[JournalRow]:
        return await self._run(self.journal.rows, session_id)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._writer.shutdown(wait=True)
        self.db.close()
        if self._lock is not None:
            self._lock.release()
