"""Group commit: what concurrent callers hand one writer thread, done together.

A caller awaits its own item. The first item queues a round on the writer;
every item that arrives before that round starts joins it, so while the
writer is busy (a commit, a write(2)) the next round gathers everyone who
came meanwhile: one transaction or one write for many calls, each caller
released only once that round is done, with its own item's outcome. With
one caller at a time a round holds one item and costs what a plain hop to
the writer thread did.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Generic, TypeVar

T = TypeVar("T")
# What a round returns: per item, None (done) or the exception its caller gets.
Outcomes = Sequence[BaseException | None]


class GroupWriter(Generic[T]):
    """Rounds of `flush(items)` on `executor` (one thread: rounds never overlap)."""

    def __init__(self, executor: Executor, flush: Callable[[list[T]], Outcomes]) -> None:
        self._executor = executor
        self._flush = flush
        self._items: list[tuple[T, asyncio.Future[None]]] = []
        self._lock = threading.Lock()
        self._queued = False

    @property
    def pending(self) -> bool:
        """A round is queued and still gathering items."""
        return self._queued

    async def submit(self, item: T) -> None:
        """Returns once the round holding `item` is done; raises what it failed with."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._items.append((item, done))
            queue, self._queued = not self._queued, True
        if queue:
            self._executor.submit(self._round, loop)
        await done

    def _round(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            taken, self._items = self._items, []
            self._queued = False
        try:
            outcomes = list(self._flush([item for item, _ in taken]))
        except Exception as exc:  # noqa: BLE001 - the whole round failed: every caller gets it
            outcomes = [exc] * len(taken)
        settled = [(done, outcome) for (_, done), outcome in zip(taken, outcomes, strict=True)]
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
            loop.call_soon_threadsafe(_settle, settled)


def _settle(settled: list[tuple[asyncio.Future[None], BaseException | None]]) -> None:
    """On the loop: each caller gets its item's outcome (one wake-up per round)."""
    for done, outcome in settled:
        if done.cancelled():
            continue
        if outcome is None:
            done.set_result(None)
        else:
            done.set_exception(outcome)
