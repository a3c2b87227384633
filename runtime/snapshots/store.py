"""Snapshots at rest: metadata in the state database, file contents as blobs.

Deduplication is content addressing per file: a regular file's bytes are
stored once under `state_dir/snapshots/blobs/<sha256[:2]>/<sha256>`, and a
snapshot is a manifest (one row per entry: path, type, mode, size, hash or
link target) in the `snapshot_entries` table. Forty snapshots of a mostly
unchanged workspace cost one copy of each distinct file plus forty
manifests; the cost is a SHA-256 pass over every byte on each snapshot (the
bytes travel anyway) and a file changed by one byte is stored again whole.

A tenant's `snapshot_max_bytes` counts the distinct blobs its snapshots
reference (what they really hold on disk for it), so the forty snapshots
above count once. A capture stages its new blobs apart (`Staging`) and
`commit` checks the ceiling before anything enters the store: a refused
snapshot leaves the store as it was. Blobs no manifest references any more
are removed with the last snapshot that held them, under the same lock as
commits, so a commit never references a blob being removed.

Expired snapshots (`expires_at` past) are NOT_FOUND at once and purged on
the next store operation.

Names are bytes: an entry's path and link target are stored as BLOBs (the
file system's bytes, `surrogateescape` in Python), so any name a sandbox
makes round-trips. A commit that fails removes the blobs it moved in, and
`collect` removes blobs no manifest references (a crash between the two);
it runs under the commits' lock, so never on a snapshot being written.

A fork records its intent (`forks`) before it makes anything and drops it
once it answers; a start-up finding one left (a crash mid-fork) removes
what it made (`sessions.state` marks its sessions, see `Snapshots.recover`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from runtime.errors import SnapshotNotFound
from runtime.snapshots.staging import QUOTA_KEY, SHARE_KEY, Staging, over_quota
from runtime.state.db import FILE_NAME, Component, StateDB

log = logging.getLogger(__name__)

ID_PREFIX = "snap_"
# Snapshot kinds: the ones clients made, a session's implicit one at
# creation (workspace_diff's "start"), and a fork's transient one.
USER, START, FORK = "user", "start", "fork"

COMPONENT = Component(
    "snapshots",
    [
        """
        CREATE TABLE snapshots (
            id TEXT PRIMARY KEY, tenant TEXT NOT NULL, session_id TEXT NOT NULL,
            label TEXT NOT NULL, kind TEXT NOT NULL, created_at REAL NOT NULL,
            expires_at REAL NOT NULL, bytes INTEGER NOT NULL, files INTEGER NOT NULL,
            source TEXT NOT NULL
        );
        CREATE INDEX snapshots_tenant ON snapshots (tenant);
        CREATE TABLE snapshot_entries (
            snapshot_id TEXT NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL, area TEXT NOT NULL, path TEXT NOT NULL,
            kind TEXT NOT NULL, mode INTEGER NOT NULL, size INTEGER NOT NULL,
            sha256 TEXT NOT NULL, linkname TEXT NOT NULL, mtime INTEGER NOT NULL,
            PRIMARY KEY (snapshot_id, seq)
        );
        CREATE INDEX snapshot_entries_sha ON snapshot_entries (sha256)
        """,
        # Names as bytes (a name need not be UTF-8); forks' intents.
        """
        CREATE TABLE snapshot_entries_bytes (
            snapshot_id TEXT NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL, area TEXT NOT NULL, path BLOB NOT NULL,
            kind TEXT NOT NULL, mode INTEGER NOT NULL, size INTEGER NOT NULL,
            sha256 TEXT NOT NULL, linkname BLOB NOT NULL, mtime INTEGER NOT NULL,
            PRIMARY KEY (snapshot_id, seq)
        );
        INSERT INTO snapshot_entries_bytes
            SELECT snapshot_id, seq, area, CAST(path AS BLOB), kind, mode, size, sha256,
                   CAST(linkname AS BLOB), mtime
            FROM snapshot_entries;
        DROP TABLE snapshot_entries;
        ALTER TABLE snapshot_entries_bytes RENAME TO snapshot_entries;
        CREATE INDEX snapshot_entries_sha ON snapshot_entries (sha256);
        CREATE TABLE forks (
            id TEXT PRIMARY KEY, tenant TEXT NOT NULL, started_at REAL NOT NULL
        )
        """,
    ],
)


# The snapshots table's columns, in order (Snapshot's fields).
SNAPSHOT_COLUMNS = (
    "id",
    "tenant",
    "session_id",
    "label",
    "kind",
    "created_at",
    "expires_at",
    "bytes",
    "files",
    "source",
)


@dataclass(frozen=True)
class Entry:
    """One entry of a snapshot, relative to its area (`workspace` or `tmp`)."""

    area: str
    path: str
    kind: str  # "dir", "file" or "symlink"
    mode: int
    size: int = 0
    sha256: str = ""
    linkname: str = ""
    mtime: int = 0


@dataclass
class Snapshot:
    """A snapshot's metadata; `source` is what a fork or restore needs of
    the session it was taken from (its spec and shell state, no secret values)."""

    id: str
    tenant: str
    session_id: str
    label: str
    kind: str
    created_at: float
    expires_at: float
    bytes: int
    files: int
    source: dict[str, Any] = field(default_factory=dict)


def new_id() -> str:
    return ID_PREFIX + uuid.uuid4().hex


class SnapshotStore:
    """Every tenant's snapshots under `state_dir/snapshots`, their metadata
    in the state database (`db`, or opened there on first use: a daemon that
    never snapshots writes nothing)."""

    def __init__(
        self,
        state_dir: str,
        ttl_seconds: float,
        db: StateDB | None = None,
        reserve_bytes: int = 0,
        share: float = 1.0,
    ) -> None:
        self._state_dir = state_dir
        # Free bytes of the state disk only bookkeeping may use, and the
        # fraction of the snapshot space one tenant may hold.
        self.reserve_bytes = reserve_bytes
        self.share = share
        self._opened = db
        # A database handed in is its owner's to close (the composition root's).
        self._owns_db = db is None
        self._made = False
        self.root = os.path.join(state_dir, "snapshots")
        self.ttl_seconds = ttl_seconds
        self._blobs = os.path.join(self.root, "blobs")
        self._staging = os.path.join(self.root, "staging")
        # Commits and removals of blobs, never at the same time.
        self._lock = threading.Lock()
        self._open_lock = threading.Lock()

    @property
    def _db(self) -> StateDB:
        return self._open()

    def _open(self) -> StateDB:
        """The database, opened (and the store's directories made) on first use."""
        with self._open_lock:
            if self._opened is None:
                self._opened = StateDB.open(self._state_dir, [COMPONENT])
            if not self._made:
                os.makedirs(self._blobs, mode=0o700, exist_ok=True)
                # Staged blobs of captures a crash interrupted belong to nobody.
                shutil.rmtree(self._staging, ignore_errors=True)
                os.makedirs(self._staging, mode=0o700, exist_ok=True)
                self._made = True
            return self._opened

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """A query's rows; none from a store never written (reading one,
        e.g. ListSnapshots, creates nothing under state_dir)."""
        if self._opened is None and not os.path.exists(os.path.join(self._state_dir, FILE_NAME)):
            return []
        with self._db.lock:
            return list(self._db.conn.execute(sql, params).fetchall())

    def close(self) -> None:
        with self._open_lock:
            if self._opened is not None and self._owns_db:
                self._opened.close()
                self._opened = None

    # -- capture ------------------------------------------------------------
    def staging(self, tenant: str, max_bytes: int | None) -> Staging:
        """Where a capture for `tenant` writes its blobs (the ceilings applied as it goes)."""
        self._open()  # a capture is what creates the store
        self.purge_expired()
        known = self._tenant_blobs(tenant)
        used = sum(known.values())
        # A share of 1 is the whole space above the reserve: the reserve's check.
        room, key = (None, "") if self.share >= 1 else (self._share_room(used), SHARE_KEY)
        if max_bytes is not None and (room is None or max_bytes - used < room):
            room, key = max_bytes - used, QUOTA_KEY
        return Staging(
            os.path.join(self._staging, uuid.uuid4().hex),
            set(known),
            None if room is None else max(0, room),
            key,
            self.reserve_bytes,
        )

    def _share_room(self, used: int) -> int:
        """What the tenant may add under `share` of the snapshot space (what
        the store holds plus the disk's free bytes above the reserve)."""
        free = shutil.disk_usage(self.root).free - self.reserve_bytes
        space = self.stored_bytes() + max(0, free)
        return int(space * self.share) - used

    def commit(
        self, snapshot: Snapshot, entries: list[Entry], staging: Staging, max_bytes: int | None
    ) -> Snapshot:
        """Enter the snapshot and its new blobs, or refuse it (RESOURCE_EXHAUSTED)
        and leave the store as it was. The staging is gone either way."""
        try:
            with self._lock:
                known = self._tenant_blobs(snapshot.tenant)
                wanted = {e.sha256: e.size for e in entries if e.kind == "file"}
                new = sum(size for sha, size in wanted.items() if sha not in known)
                if max_bytes is not None and sum(known.values()) + new > max_bytes:
                    raise over_quota(max(0, max_bytes - sum(known.values())), new)
                moved: list[str] = []
                try:
                    self._move_in(staging, moved)
                    missing = [sha for sha in wanted if not self._has(sha)]
                    if missing:
                        msg = f"blob {missing[0]} of the snapshot is missing from the store"
                        raise OSError(msg)
                    self._insert(snapshot, entries)
                except BaseException:
                    # Nothing else references them: they were not here before
                    # and the lock kept other commits out.
                    for path in moved:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(path)
                    raise
        finally:
            staging.discard()
        return snapshot

    def _move_in(self, staging: Staging, moved: list[str]) -> None:
        """The staging's blobs the store lacks, renamed into it (each appended
        to `moved` as it goes) and synced."""
        for sha in staging.blobs:
            target = self._blob_path(sha)
            if not os.path.exists(target):
                os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
                os.rename(os.path.join(staging.path, sha), target)
                moved.append(target)
        # The renames too must be on disk before the manifest is.
        directories = {os.path.dirname(path) for path in moved}
        for directory in directories | ({self._blobs} if moved else set()):
            _sync_dir(directory)

    def copy(self, snapshot: Snapshot, entries: list[Entry]) -> Snapshot:
        """A snapshot of entries already stored (rows only: the blobs are
        shared), e.g. a session's start from the snapshot it was made from."""
        with self._lock:
            missing = [e.path for e in entries if e.kind == "file" and not self._has(e.sha256)]
            if missing:
                msg = f"no snapshot holds {missing[0]!r} any more (deleted meanwhile?)"
                raise SnapshotNotFound(msg)
            self._insert(snapshot, entries)
        return snapshot

    def _has(self, sha256: str) -> bool:
        return os.path.exists(self._blob_path(sha256))

    def _insert(self, snapshot: Snapshot, entries: list[Entry]) -> None:
        with self._db.lock:
            conn = self._db.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(
                    "INSERT INTO snapshots VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        snapshot.id,
                        snapshot.tenant,
                        snapshot.session_id,
                        snapshot.label,
                        snapshot.kind,
                        snapshot.created_at,
                        snapshot.expires_at,
                        snapshot.bytes,
                        snapshot.files,
                        json.dumps(snapshot.source),
                    ),
                )
                conn.executemany(
                    "INSERT INTO snapshot_entries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (snapshot.id, seq, e.area, _name_bytes(e.path), e.kind, e.mode)
                        + (e.size, e.sha256, _name_bytes(e.linkname), e.mtime)
                        for seq, e in enumerate(entries)
                    ],
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    # -- reading ------------------------------------------------------------
    def get(self, tenant: str, snapshot_id: str) -> Snapshot:
        """The tenant's live snapshot; NOT_FOUND, worded alike, for another's,
        an expired one, or none."""
        rows = self._rows(
            "SELECT * FROM snapshots WHERE id = ? AND tenant = ? AND expires_at > ?",
            (snapshot_id, tenant, time.time()),
        )
        if not rows:
            msg = f"no snapshot {snapshot_id[:80]!r}"
            raise SnapshotNotFound(msg)
        return _snapshot(rows[0])

    def listed(self, tenant: str, kind: str = USER) -> list[Snapshot]:
        self.purge_expired()
        rows = self._rows(
            "SELECT * FROM snapshots WHERE tenant = ? AND kind = ? ORDER BY created_at",
            (tenant, kind),
        )
        return [_snapshot(row) for row in rows]

    def entries(self, snapshot_id: str) -> list[Entry]:
        rows = self._rows(
            "SELECT area, path, kind, mode, size, sha256, linkname, mtime "
            "FROM snapshot_entries WHERE snapshot_id = ? ORDER BY seq",
            (snapshot_id,),
        )
        return [
            Entry(area, _name(path), kind, mode, size, sha, _name(link), mtime)
            for area, path, kind, mode, size, sha, link, mtime in rows
        ]

    def read_blob(self, sha256: str) -> bytes:
        with self.open_blob(sha256) as f:
            return f.read()

    @contextlib.contextmanager
    def open_blob(self, sha256: str) -> Iterator[IO[bytes]]:
        with open(self._blob_path(sha256), "rb") as f:
            yield f

    def usage(self, tenant: str) -> int:
        """Bytes the tenant's snapshots hold (each distinct blob once)."""
        return sum(self._tenant_blobs(tenant).values())

    def stored_bytes(self) -> int:
        """Bytes of every blob in the store (what deduplication saves shows here)."""
        rows = self._rows("SELECT DISTINCT sha256, size FROM snapshot_entries WHERE kind = 'file'")
        return sum(int(row[1]) for row in rows)

    def _tenant_blobs(self, tenant: str) -> dict[str, int]:
        rows = self._rows(
            "SELECT DISTINCT e.sha256, e.size FROM snapshot_entries e "
            "JOIN snapshots s ON s.id = e.snapshot_id WHERE s.tenant = ? AND e.kind = 'file'",
            (tenant,),
        )
        return {str(sha): int(size) for sha, size in rows}

    # -- removal ------------------------------------------------------------
    def delete(self, tenant: str, snapshot_id: str) -> None:
        self.get(tenant, snapshot_id)  # NOT_FOUND as for any other RPC
        self._remove([snapshot_id])

    def discard(self, snapshot_id: str) -> None:
        """Remove a snapshot the daemon made for itself (a fork's, a session's start)."""
        self._remove([snapshot_id])

    def purge_orphans(self, kind: str, live_session_ids: set[str]) -> None:
        """Remove the daemon's own snapshots of `kind` whose session is gone."""
        rows = self._rows("SELECT id, session_id FROM snapshots WHERE kind = ?", (kind,))
        gone = [row[0] for row in rows if row[1] not in live_session_ids]
        if gone:
            self._remove(gone)

    def purge_expired(self) -> None:
        rows = self._rows("SELECT id FROM snapshots WHERE expires_at <= ?", (time.time(),))
        if rows:
            self._remove([row[0] for row in rows])

    def _remove(self, ids: list[str]) -> None:
        with self._lock:
            with self._db.lock:
                conn = self._db.conn
                marks = ",".join("?" * len(ids))
                shas = {
                    row[0]
                    for row in conn.execute(
                        f"SELECT DISTINCT sha256 FROM snapshot_entries "  # noqa: S608 - marks only
                        f"WHERE kind = 'file' AND snapshot_id IN ({marks})",
                        ids,
                    )
                }
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute(f"DELETE FROM snapshots WHERE id IN ({marks})", ids)  # noqa: S608
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                still = {
                    row[0]
                    for sha in shas
                    for row in conn.execute(
                        "SELECT sha256 FROM snapshot_entries WHERE sha256 = ? LIMIT 1", (sha,)
                    )
                }
            for sha in shas - still:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._blob_path(sha))

    def collect(self) -> int:
        """Remove blobs no manifest references (left by a crash mid-commit);
        how many. Blobs enter the store only under the commits' lock, held
        here, so none of a snapshot being written is taken."""
        if self._opened is None and not os.path.exists(os.path.join(self._state_dir, FILE_NAME)):
            return 0
        self._open()
        # Listed before the lock: a blob committed meanwhile is not listed.
        found = {
            name: os.path.join(folder, name)
            for folder, _, names in os.walk(self._blobs)
            for name in names
        }
        removed = 0
        with self._lock:
            held = {row[0] for row in self._rows("SELECT DISTINCT sha256 FROM snapshot_entries")}
            for sha, path in found.items():
                if sha not in held:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                        removed += 1
        if removed:
            log.info("removed %d blob(s) no snapshot references", removed)
        return removed

    # -- forks across a crash -----------------------------------------------
    def fork_started(self, fork_id: str, tenant: str) -> None:
        """Record a fork's intent (durably) before it makes anything."""
        with self._open().lock:
            self._db.conn.execute(
                "INSERT INTO forks VALUES (?, ?, ?)", (fork_id, tenant, time.time())
            )

    def fork_ended(self, fork_id: str) -> None:
        with self._db.lock:
            self._db.conn.execute("DELETE FROM forks WHERE id = ?", (fork_id,))

    def unfinished_forks(self) -> set[str]:
        return {str(row[0]) for row in self._rows("SELECT id FROM forks")}

    def forget_forks(self, fork_ids: set[str], session_ids: set[str]) -> None:
        """After a crash: the snapshots of unfinished forks (every transient one,
        and those of the sessions they made), then their intents."""
        rows = self._rows("SELECT id, kind, session_id FROM snapshots")
        gone = [row[0] for row in rows if row[1] == FORK or row[2] in session_ids]
        if gone:
            self._remove(gone)
        for fork_id in fork_ids:
            self.fork_ended(fork_id)

    def _blob_path(self, sha256: str) -> str:
        return os.path.join(self._blobs, sha256[:2], sha256)


def _name_bytes(name: str) -> bytes:
    """A name as the file system's bytes (tarfile decodes with surrogateescape)."""
    return name.encode("utf-8", "surrogateescape")


def _name(stored: bytes | str) -> str:
    """A stored name back as tarfile would give it."""
    if isinstance(stored, str):
        return stored
    return stored.decode("utf-8", "surrogateescape")


def _sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _snapshot(row: tuple[Any, ...]) -> Snapshot:
    fields = dict(zip(SNAPSHOT_COLUMNS, row, strict=True))
    fields["source"] = json.loads(fields["source"])
    return Snapshot(**fields)
