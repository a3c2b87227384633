"""The daemon's file descriptors: what is left of RLIMIT_NOFILE, and running out of them.

Sessions, RPCs, the state database and the audit log all need descriptors;
proxy connections are the one use sandboxes can multiply (two each). The
proxy admits one only while more than `shares.fd_reserve` would stay free,
so the daemon's own work keeps room. Whatever still runs out (EMFILE,
ENFILE) is exhaustion, not a bug: callers answer it UNAVAILABLE or
RESOURCE_EXHAUSTED and log it at most once a minute, never a traceback per
event.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE})
# Counting /proc/self/fd costs a directory read: at most this often, with
# the descriptors spent since added to the count in between.
SAMPLE_S = 0.1
# Exhaustion is logged at most once per this many seconds.
LOG_INTERVAL_S = 60.0


def soft_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def count_open() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0  # no /proc, or no descriptor left to read it: judged by EMFILE itself


def out_of_descriptors(exc: BaseException | None) -> bool:
    """Whether `exc`, or an error it was raised from, is EMFILE or ENFILE."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, OSError) and exc.errno in EXHAUSTED:
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


class Descriptors:
    """How many descriptors may still be spent above the reserve."""

    def __init__(
        self,
        reserve: int,
        limit: Callable[[], int] = soft_limit,
        count: Callable[[], int] = count_open,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reserve = reserve
        self._limit = limit
        self._count = count
        self._clock = clock
        self._in_use = 0
        self._sampled_at = -SAMPLE_S

    def free(self) -> int:
        """Descriptors left above the reserve (negative: inside it)."""
        now = self._clock()
        if now - self._sampled_at >= SAMPLE_S:
            self._in_use, self._sampled_at = self._count(), now
        return self._limit() - self.reserve - self._in_use

    def spend(self, n: int) -> None:
        """`n` descriptors opened since the last count."""
        self._in_use += n


class ExhaustionLog:
    """Says that descriptors ran out, at most once a minute (with how often since)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._next = 0.0
        self._since = 0

    def note(self, where: str, exc: BaseException | None = None) -> None:
        now = self._clock()
        self._since += 1
        if now < self._next:
            return
        log.error(
            "out of file descriptors (%s) in %s: %d time(s) since the last report; "
            "answered UNAVAILABLE or RESOURCE_EXHAUSTED (RLIMIT_NOFILE %d, shares.fd_reserve)",
            exc if exc is not None else "EMFILE",
            where,
            self._since,
            soft_limit(),
        )
        self._since = 0
        self._next = now + LOG_INTERVAL_S


# One per process: descriptors are the process's, whoever runs out of them.
EXHAUSTION = ExhaustionLog()


def quiet_exhaustion(loop: asyncio.AbstractEventLoop) -> None:
    """Make the loop report running out of descriptors once a minute: asyncio's
    servers otherwise log a traceback for every accept refused with EMFILE,
    and another for each of the retries it then schedules (one per refused
    accept) that finds its server closed meanwhile (a session that ended)."""
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if out_of_descriptors(exc):
            EXHAUSTION.note(str(context.get("message", "the event loop")), exc)
        elif isinstance(exc, ValueError) and "._start_serving(" in repr(context.get("handle")):
            log.debug("an accept retried after its server closed: %s", exc)
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
