"""Transfer slots: a daemon-wide number, a share of them per tenant, and lost when idle.

Every upload or download holds a window of chunks in the daemon while it
moves data, so their number is bounded daemon-wide (`shares.transfers`;
more wait their turn). One tenant may hold, or wait for, at most
`shares.transfers_per_tenant` of them: one more is refused at once, so a
tenant that opens streams and stalls cannot take the slots of the others.
A transfer whose client sends (upload) or takes (download) nothing for
`shares.transfer_idle_s` loses its slot and ends RESOURCE_EXHAUSTED naming
the key, rather than holding the slot for the whole transfer deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable

from runtime.config import SharesConfig
from runtime.errors import ShareExhausted

# `toolrt_share_refusals_total{share}` labels: the keys refusing.
SHARE_TRANSFERS = "transfers_per_tenant"
SHARE_TRANSFER_IDLE = "transfer_idle_s"


class Slot:
    """One transfer's slot; `lose()` gives it back early (the client stalled)."""

    def __init__(self, release: Callable[[], None], idle_s: float) -> None:
        self._release = release
        self.idle_s = idle_s
        self.lost = False
        self._held = True

    def give_back(self) -> None:
        """Idempotent: a lost slot is not given back twice."""
        if self._held:
            self._held = False
            self._release()

    def lose(self) -> None:
        self.lost = True
        self.give_back()


class TransferSlots:
    def __init__(
        self, shares: SharesConfig, refused: Callable[[str], None] = lambda share: None
    ) -> None:
        self._shares = shares
        self._refused = refused
        self._free = asyncio.Semaphore(shares.transfers)
        # Slots held or waited for, by tenant.
        self._taken: dict[str, int] = {}

    def taken(self, tenant: str) -> int:
        return self._taken.get(tenant, 0)

    @contextlib.asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[Slot]:
        """A slot for one transfer of `tenant` (waiting for a free one), or
        ShareExhausted when the tenant holds its share."""
        share = self._shares.transfers_per_tenant
        if self.taken(tenant) >= share:
            self._refused(SHARE_TRANSFERS)
            msg = (
                f"tenant {tenant} already has {share} uploads or downloads under way, its "
                "share of the daemon's transfer slots (shares.transfers_per_tenant); retry "
                "when one ends"
            )
            raise ShareExhausted(msg, SHARE_TRANSFERS)
        self._taken[tenant] = self.taken(tenant) + 1
        try:
            await self._free.acquire()
            slot = Slot(self._free.release, self._shares.transfer_idle_s)
            try:
                yield slot
            finally:
                slot.give_back()
        finally:
            self._taken[tenant] -= 1
            if not self._taken[tenant]:
                del self._taken[tenant]

    def idle(self, slot: Slot, what: str) -> ShareExhausted:
        """The error a transfer ends with once its client was silent too long."""
        self._refused(SHARE_TRANSFER_IDLE)
        msg = (
            f"the {what}'s client {'sent' if what == 'upload' else 'took'} nothing for "
            f"{slot.idle_s:g} s (shares.transfer_idle_s): its transfer slot was given to "
            "others; start the transfer again"
        )
        return ShareExhausted(msg, SHARE_TRANSFER_IDLE)

    async def paced_in(
        self, slot: Slot, chunks: AsyncIterable[bytes]
    ) -> AsyncGenerator[bytes, None]:
        """An upload's chunks; ShareExhausted when the client is silent too long."""
        source = aiter(chunks)
        while True:
            try:
                async with asyncio.timeout(slot.idle_s):
                    chunk = await anext(source)
            except StopAsyncIteration:
                return
            except TimeoutError:
                slot.lose()
                raise self.idle(slot, "upload") from None
            yield chunk

    async def paced_out(
        self, slot: Slot, chunks: AsyncIterable[bytes]
    ) -> AsyncGenerator[bytes, None]:
        """A download's chunks. While the client takes nothing (this generator
        waits at its `yield`), a timer gives the slot back; the client then
        reads the end of the stream: ShareExhausted."""
        loop = asyncio.get_running_loop()
        async for chunk in chunks:
            timer = loop.call_later(slot.idle_s, slot.lose)
            try:
                yield chunk
            finally:
                timer.cancel()
            if slot.lost:
                raise self.idle(slot, "download")
