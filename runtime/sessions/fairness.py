"""Tenants take turns to start calls while more than one is calling.

The calls of a session run in its sandbox, but on the same CPUs as every
other sandbox: a tenant running many short calls back to back (a flood of
`shell true`) keeps the host's cores busy starting its processes, and
another tenant's call waits for a core behind them — on two cores, a quiet
tenant's `shell true` took five to six times as long beside such a flood.

So while calls of two or more tenants are starting (a call is starting for
its first `slice_s`), each tenant may start one call at once freely, and
calls beyond that share `slots` among all tenants: a call that finds none
free waits in its tenant's queue, and the queues are served in turn, one
call each, so a tenant's next call never waits behind more than one turn of
each neighbour. A call gives its slot back when it ends or once it has run
for `slice_s`, whichever comes first: a long call (a build, a `sleep`)
keeps running without holding a slot, and never holds up anyone's next call
for longer than a slice. A tenant calling alone is never held: its batch of
reads runs at once, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import AsyncIterator


class FairStarts:
    """Turns of tenants for the first `slice_s` of each call (see above); `slice_s` 0: off."""

    def __init__(self, slots: int, slice_s: float) -> None:
        self.slots = max(1, slots)
        self.slice_s = slice_s
        self._free = self.slots
        # Tenants with calls waiting for a slot, in the order they are served next.
        self._queues: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()
        # Calls of each tenant in their first slice, with a slot or not, and
        # when each tenant last started one.
        self._starting: dict[str, int] = {}
        self._seen: dict[str, float] = {}

    def waiting(self, tenant: str) -> int:
        """How many of the tenant's calls wait for a slot."""
        return len(self._queues.get(tenant, ()))

    def _contended(self, tenant: str, now: float) -> bool:
        """Whether another tenant is starting calls, or started one within a slice."""
        for other, seen in list(self._seen.items()):
            if now - seen >= self.slice_s and not self._starting.get(other):
                del self._seen[other]
            elif other != tenant:
                return True
        return bool(self._queues)

    @contextlib.asynccontextmanager
    async def turn(self, tenant: str) -> AsyncIterator[None]:
        """Run the block as a call of `tenant`, once it is its turn."""
        if not self.slice_s:
            yield
            return
        loop = asyncio.get_running_loop()
        slot = False
        if self._starting.get(tenant) and self._contended(tenant, loop.time()):
            slot = True
            if self._free and not self._queues:
                self._free -= 1
            else:
                await self._wait(tenant)
        self._seen[tenant] = loop.time()
        self._starting[tenant] = self._starting.get(tenant, 0) + 1
        done = False

        def release() -> None:
            nonlocal done
            if done:
                return
            done = True
            left = self._starting[tenant] - 1
            if left:
                self._starting[tenant] = left
            else:
                del self._starting[tenant]
            if slot:
                self._hand_on()

        timer = loop.call_later(self.slice_s, release)
        try:
            yield
        finally:
            timer.cancel()
            release()

    async def _wait(self, tenant: str) -> None:
        turn = asyncio.get_running_loop().create_future()
        self._queues.setdefault(tenant, deque()).append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._hand_on()  # given a slot as it was cancelled: pass it on
            else:
                self._forget(tenant, turn)
            raise

    def _forget(self, tenant: str, turn: asyncio.Future[None]) -> None:
        queue = self._queues.get(tenant)
        if queue is not None and turn in queue:
            queue.remove(turn)
            if not queue:
                del self._queues[tenant]

    def _hand_on(self) -> None:
        """A slot came free: to the next tenant in turn, or back to the free ones."""
        while self._queues:
            tenant, queue = next(iter(self._queues.items()))
            turn = queue.popleft()
            if queue:
                self._queues.move_to_end(tenant)
            else:
                del self._queues[tenant]
            if not turn.done():
                turn.set_result(None)
                return
        self._free += 1
