"""A capture's new blobs, written apart from the store until it commits.

Blobs are named by the SHA-256 of their bytes; one the tenant's snapshots
already hold is dropped at once, and the new bytes are counted against the
room the tenant's `snapshot_max_bytes` leaves, so a capture over it stops at
the file that overflows it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from typing import IO

from runtime.errors import AdmissionRefused

CHUNK = 1 << 20


class Staging:
    """Blobs of one capture, written apart from the store until `commit`.

    `room` is how many new bytes the tenant may still store (None: no
    ceiling); a capture that goes past it stops at that file.
    """

    def __init__(self, path: str, known: set[str], room: int | None) -> None:
        self.path = path
        self.known = known
        self.room = room
        self.new_bytes = 0
        self.blobs: dict[str, int] = {}
        os.makedirs(path, mode=0o700)

    def add(self, source: IO[bytes], size: int) -> str:
        """Store `size` bytes read from `source`; their SHA-256."""
        digest = hashlib.sha256()
        temp = os.path.join(self.path, "incoming")
        with open(temp, "wb") as out:
            left = size
            while left:
                data = source.read(min(CHUNK, left))
                if not data:
                    msg = "the sandbox's archive ended inside a file"
                    raise OSError(msg)
                digest.update(data)
                out.write(data)
                left -= len(data)
        sha = digest.hexdigest()
        if sha in self.known or sha in self.blobs:
            os.unlink(temp)
            return sha
        self.new_bytes += size
        if self.room is not None and self.new_bytes > self.room:
            os.unlink(temp)
            raise over_quota(self.room, self.new_bytes)
        os.rename(temp, os.path.join(self.path, sha))
        self.blobs[sha] = size
        return sha

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def over_quota(room: int, wanted: int) -> AdmissionRefused:
    msg = (
        f"the snapshot would store {wanted} new bytes, and the tenant's snapshot_max_bytes "
        f"leaves room for {room}; delete snapshots (DeleteSnapshot) or ask for a larger quota"
    )
    return AdmissionRefused(msg)
