"""A capture's new blobs, written apart from the store until it commits.

Blobs are named by the SHA-256 of their bytes; one the tenant's snapshots
already hold is dropped at once, and the new bytes are counted against the
room the tenant's `snapshot_max_bytes` leaves, so a capture over it stops at
the file that overflows it. Every new blob must also leave the state disk's
reserve (`shares.state_reserve_bytes`) free: that space is for the daemon's own
records (sessions, the call journal), so a full blob store refuses
snapshots, never calls or sessions.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from typing import IO

from runtime.errors import SnapshotRefused

CHUNK = 1 << 20


class Staging:
    """Blobs of one capture, written apart from the store until `commit`.

    `room` is how many new bytes the tenant may still store (None: no
    ceiling), `room_key` the config key that sets it; a capture that goes
    past it, or would leave less than `reserve` bytes free on the disk,
    stops at that file.
    """

    def __init__(
        self, path: str, known: set[str], room: int | None, room_key: str, reserve: int
    ) -> None:
        self.path = path
        self.known = known
        self.room = room
        self.room_key = room_key
        self.reserve = reserve
        self.new_bytes = 0
        self.blobs: dict[str, int] = {}
        os.makedirs(path, mode=0o700)

    def add(self, source: IO[bytes], size: int) -> str:
        """Store `size` bytes read from `source`; their SHA-256.

        A file up to CHUNK is hashed in memory first, so content the store
        holds already (most files of a repeated snapshot) never touches the
        disk; a larger one streams through a temporary file.
        """
        if size <= CHUNK:
            data = _read_exactly(source, size)
            sha = hashlib.sha256(data).hexdigest()
            if not self._is_new(sha, size):
                return sha
            with open(os.path.join(self.path, sha), "wb") as out:
                out.write(data)
                _sync(out)
            self.blobs[sha] = size
            return sha
        # Checked before the bytes touch the disk (they may turn out known).
        self._check_disk(size)
        digest = hashlib.sha256()
        temp = os.path.join(self.path, "incoming")
        with open(temp, "wb") as out:
            left = size
            while left:
                data = _read_exactly(source, min(CHUNK, left))
                digest.update(data)
                out.write(data)
                left -= len(data)
            _sync(out)
        sha = digest.hexdigest()
        try:
            new = self._is_new(sha, size)
        except SnapshotRefused:
            os.unlink(temp)
            raise
        if not new:
            os.unlink(temp)
            return sha
        os.rename(temp, os.path.join(self.path, sha))
        self.blobs[sha] = size
        return sha

    def _is_new(self, sha: str, size: int) -> bool:
        """Whether the blob must be stored; over the room: RESOURCE_EXHAUSTED."""
        if sha in self.known or sha in self.blobs:
            return False
        self.new_bytes += size
        if self.room is not None and self.new_bytes > self.room:
            raise over_quota(self.room, self.new_bytes, self.room_key)
        if size <= CHUNK:
            self._check_disk(size)
        return True

    def _check_disk(self, size: int) -> None:
        free = shutil.disk_usage(self.path).free
        if free - size < self.reserve:
            raise disk_full(self.reserve)

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _sync(out: IO[bytes]) -> None:
    """On disk before the manifest naming it is committed: after a host crash
    a listed snapshot has all its blobs (the state database, synchronous=NORMAL,
    may lose the last manifests then, never keep one without its blobs)."""
    out.flush()
    os.fsync(out.fileno())


def _read_exactly(source: IO[bytes], size: int) -> bytes:
    data = source.read(size)
    if len(data) != size:
        # Not OSError: that would be the store's own failure.
        msg = "the sandbox's archive ended inside a file"
        raise EOFError(msg)
    return data


# The config keys a snapshot's room comes from (the refusals metric's labels).
QUOTA_KEY = "snapshot_max_bytes"
SHARE_KEY = "shares.snapshot_space"
RESERVE_KEY = "shares.state_reserve_bytes"


def over_quota(room: int, wanted: int, key: str = QUOTA_KEY) -> SnapshotRefused:
    what = (
        "the tenant's snapshot_max_bytes"
        if key == QUOTA_KEY
        else f"the tenant's share of the state disk ({key})"
    )
    msg = (
        f"the snapshot would store {wanted} new bytes, and {what} leaves room for {room}; "
        "delete snapshots (DeleteSnapshot) or ask for a larger quota"
    )
    return SnapshotRefused(msg, key)


def disk_full(reserve: int) -> SnapshotRefused:
    msg = (
        f"the daemon's state disk is full: its last {reserve} bytes ({RESERVE_KEY}) are kept "
        "for sessions and calls; delete snapshots (DeleteSnapshot) or retry later"
    )
    return SnapshotRefused(msg, RESERVE_KEY)
