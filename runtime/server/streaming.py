"""Relaying a running task's events to a server stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, TypeVar

T = TypeVar("T")


async def events_until_done(
    task: asyncio.Future[Any], events: asyncio.Queue[T]
) -> AsyncIterator[T]:
    """Each event `task` queues, as it comes, until the task is done and
    its last event taken; the task's own outcome is the caller's to read.
    A pending read is cancelled if the stream ends early (the client left)."""
    getter: asyncio.Future[T] | None = None
    try:
        while not task.done() or not events.empty():
            getter = asyncio.ensure_future(events.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield getter.result()
            else:
                getter.cancel()
    finally:
        if getter is not None and not getter.done():
            getter.cancel()
