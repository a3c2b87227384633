"""A share of something the daemon's users take turns at, by key (a tenant, a session).

At most `at_once` holders per key; the others wait in arrival order. Callers
that refuse rather than queue past some number ask `users` first (the check
and the `hold` that follows run without an await between them, so no other
task slips in). A key's entry is removed when its last user leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class _Slots:
    def __init__(self, at_once: int) -> None:
        self.semaphore = asyncio.Semaphore(at_once)
        self.users = 0


class Share:
    def __init__(self, at_once: int) -> None:
        self.at_once = max(1, at_once)
        self._slots: dict[str, _Slots] = {}

    def users(self, key: str) -> int:
        """Holders and waiters of `key`."""
        slots = self._slots.get(key)
        return slots.users if slots else 0

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        slots = self._slots.setdefault(key, _Slots(self.at_once))
        slots.users += 1
        try:
            async with slots.semaphore:
                yield
        finally:
            slots.users -= 1
            if not slots.users:
                del self._slots[key]
