"""The daemon's clock for what waits on time by policy (a tenant's call rate,
the warm pool's demand window): read and waited on through one object, so
that a test holds time still or moves it on instead of sleeping through it."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


REAL_CLOCK = RealClock()
