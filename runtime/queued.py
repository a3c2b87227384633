"""Relaying what a running task queues to whoever iterates, as they take it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def queued_until_done(
    task: asyncio.Future[Any],
    queue: asyncio.Queue[T],
    taken: Callable[[T], Awaitable[None]] | None = None,
) -> AsyncGenerator[T, None]:
    """Each item `task` queues, as the caller takes it, until the task is
    done and its last item taken; the task's own outcome is the caller's to
    read. `taken(item)` runs when the caller asks for the next item while
    the task still runs (a credit back to a sender, say). A pending read is
    cancelled if the caller stops early."""
    getter: asyncio.Future[T] | None = None
    try:
        while not task.done() or not queue.empty():
            if queue.empty():
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    continue
                item = getter.result()
            else:
                item = queue.get_nowait()
            yield item
            if taken is not None and not task.done():
                await taken(item)
    finally:
        if getter is not None and not getter.done():
            getter.cancel()
