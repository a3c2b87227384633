"""One daemon per state directory: an exclusive lock on a file inside it.

A second daemon on the same `state_dir` would take the first one's warm
containers for leftovers of a previous run, re-adopt its sessions and write
the same database. The lock is `flock` on `state_dir/daemon.lock`, held for
the daemon's life and released by the kernel when its process ends, however
it ends (a `kill -9` leaves no stale lock). The file holds the holder's pid,
so the refusal can name it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from runtime.state.db import StateError

FILE_NAME = "daemon.lock"


class StateLock:
    """The held lock; `release` (or the process's end) lets it go."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def take(cls, state_dir: str) -> StateLock:
        """The lock of `state_dir`, or StateError naming the daemon holding it."""
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        path = os.path.join(state_dir, FILE_NAME)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            msg = f"state_dir {state_dir}: cannot open its lock file {path} ({exc.strerror})"
            raise StateError(msg) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            msg = (
                f"state_dir {state_dir} is in use by another toolrt daemon "
                f"({f'pid {holder}' if holder else 'its pid unknown'}); stop it first, or "
                "give this daemon its own instance and state_dir"
            )
            raise StateError(msg) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)  # the lock goes with the descriptor
        self._fd = -1


def _read_pid(fd: int) -> int:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode().strip() or 0)
    return 0
