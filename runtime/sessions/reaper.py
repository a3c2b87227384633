"""How long sessions live: TTL and idle windows, and the task that ends them.

A session has a lifetime (`ttl_seconds`, from creation) and an idle limit
(`idle_seconds`, no call or transfer for that long; one in flight is
activity, see `Session.in_use`). Both come from the request, else the config
default, clamped to the config maximum. The reaper looks every
`reaper_interval_s` and closes what is past either limit; calls still
running then get SANDBOX_LOST naming the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from runtime.sessions.session import READY, Session
from runtime.state.sessions import REASON_IDLE, REASON_TTL

log = logging.getLogger(__name__)


def clamp_window(asked: float, default: float, maximum: float) -> float:
    """The request's value, else the default, capped by the maximum.

    0 means "no limit" for the default and "no ceiling" for the maximum; a
    session that gets no limit from either still gets the ceiling.
    """
    value = asked if asked > 0 else default
    if maximum > 0:
        return min(value, maximum) if value > 0 else maximum
    return value


class Expiry(NamedTuple):
    """Which limit a session reached (`code`, state.sessions REASON_*) and
    the words its running calls are told (`reason`)."""

    code: str
    reason: str


def expiry_of(session: Session, wall: float, monotonic: float) -> Expiry | None:
    """Why `session` must close now, or None if it may live on."""
    if session.state != READY:
        return None
    if session.expires_at and wall >= session.expires_at:
        why = f"the session reached the end of its lifetime (ttl {session.ttl_seconds:g} s)"
        return Expiry(REASON_TTL, why)
    idle_for = monotonic - session.last_used
    if session.idle_seconds and session.active_calls == 0 and idle_for >= session.idle_seconds:
        why = f"the session had no call for {session.idle_seconds:g} s (idle limit)"
        return Expiry(REASON_IDLE, why)
    return None


class Reaper:
    """A background task closing sessions past their TTL or idle limit."""

    def __init__(
        self,
        sessions: Callable[[], list[Session]],
        close: Callable[[Session, Expiry], Awaitable[None]],
        interval_s: float,
    ) -> None:
        self._sessions = sessions
        self._close = close
        self._interval = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def sweep(self) -> int:
        """Close every session past a limit now; returns how many."""
        wall, mono = time.time(), time.monotonic()
        due = [(s, e) for s in self._sessions() if (e := expiry_of(s, wall, mono))]
        for session, expiry in due:
            log.info("session %s expires: %s", session.id, expiry.reason)
        outcomes = await asyncio.gather(
            *(self._close(s, e) for s, e in due), return_exceptions=True
        )
        for (session, _), outcome in zip(due, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                log.warning("closing expired session %s failed: %s", session.id, outcome)
        return len(due)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.sweep()
            except Exception:
                log.exception("the session reaper failed; it keeps running")
