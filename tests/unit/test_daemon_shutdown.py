"""A stopped daemon leaves nothing behind: no task of its own still pending,
no audit aggregate unwritten."""

from __future__ import annotations

import asyncio

from tests.unit.secured import status_of


def pending_tasks(running) -> list[str]:
    """The coroutines still pending on a daemon's loop (but this query)."""

    async def listing() -> list[str]:
        here = asyncio.current_task()
        return [
            task.get_coro().__qualname__  # type: ignore[union-attr]
            for task in asyncio.all_tasks()
            if task is not here and not task.done()
        ]

    return running.run(listing())  # type: ignore[no-any-return]


def test_a_stopped_daemon_has_written_every_refusal_and_left_no_task_pending(secured):
    intruder = secured.client(token="not-a-token")
    assert status_of(intruder.list_sessions) is not None
    core = secured.daemon.daemon.core
    stop_core = core.stop

    async def stop_then_refuse() -> None:
        # The server still answers while the core stops: a refusal now
        # must reach the log too.
        await stop_core()
        assert await asyncio.to_thread(status_of, intruder.list_sessions) is not None

    core.stop = stop_then_refuse  # type: ignore[method-assign]
    secured.daemon.run(secured.daemon.daemon.stop(grace=1))
    assert pending_tasks(secured.daemon) == []
    denied = [r["count"] for r in secured.audit() if r["event"] == "auth.denied"]
    assert sum(denied) == 2, secured.audit()
