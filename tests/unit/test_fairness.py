"""Tenants taking turns to start calls: counted, never timed."""

from __future__ import annotations

import asyncio

from runtime.sessions.fairness import FairStarts


class Calls:
    """Calls that enter their turn and stay in it until released."""

    def __init__(self, starts: FairStarts) -> None:
        self.starts = starts
        self.entered: list[str] = []
        self.gates: list[asyncio.Event] = []
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, tenant: str) -> asyncio.Event:
        gate = asyncio.Event()

        async def call() -> None:
            async with self.starts.turn(tenant):
                self.entered.append(tenant)
                await gate.wait()

        self.gates.append(gate)
        self.tasks.append(asyncio.ensure_future(call()))
        return gate

    async def settle(self) -> None:
        for _ in range(5):
            await asyncio.sleep(0)

    async def finish(self) -> None:
        for gate in self.gates:
            gate.set()
        await asyncio.gather(*self.tasks)


def test_a_tenant_calling_alone_is_never_held():
    async def scenario() -> None:
        calls = Calls(FairStarts(slots=1, slice_s=60))
        for _ in range(10):
            calls.start("alice")
        await calls.settle()
        assert calls.entered == ["alice"] * 10
        await calls.finish()

    asyncio.run(scenario())


def test_beside_a_flood_a_tenants_next_call_waits_one_turn_at_most():
    async def scenario() -> None:
        starts = FairStarts(slots=1, slice_s=60)
        calls = Calls(starts)
        a1 = calls.start("alice")
        await calls.settle()
        b1 = calls.start("bob")  # a tenant's first call at once: free, whatever alice runs
        await calls.settle()
        assert calls.entered == ["alice", "bob"]
        a2 = calls.start("alice")  # takes the shared slot
        a3 = calls.start("alice")
        for _ in range(2):
            calls.start("alice")
        await calls.settle()
        assert calls.entered == ["alice", "bob", "alice"]
        assert starts.waiting("alice") == 3
        b1.set()
        calls.start("bob")  # nothing of bob's runs: at once again
        calls.start("bob")  # beside his own running call: in turn, behind alice's queue
        await calls.settle()
        assert calls.entered == ["alice", "bob", "alice", "bob"]
        assert starts.waiting("bob") == 1
        a1.set()  # a free call ending frees no slot
        await calls.settle()
        assert len(calls.entered) == 4
        a2.set()  # the slot: to alice, queued first
        await calls.settle()
        assert calls.entered[4:] == ["alice"]
        a3.set()  # then to bob, although alice has two more queued
        await calls.settle()
        assert calls.entered[4:] == ["alice", "bob"]
        assert starts.waiting("alice") == 2
        await calls.finish()
        assert starts.waiting("alice") == starts.waiting("bob") == 0

    asyncio.run(scenario())


def test_a_long_call_gives_its_slot_back_after_a_slice():
    async def scenario() -> None:
        starts = FairStarts(slots=1, slice_s=0.05)
        calls = Calls(starts)
        calls.start("alice")
        calls.start("bob")
        calls.start("alice")  # holds the slot, never ends by itself
        calls.start("alice")
        await calls.settle()
        assert starts.waiting("alice") == 1
        await asyncio.wait_for(_until(lambda: len(calls.entered) == 4), 30)
        await calls.finish()

    asyncio.run(scenario())


def test_a_cancelled_waiter_leaves_no_slot_behind():
    async def scenario() -> None:
        starts = FairStarts(slots=1, slice_s=60)
        calls = Calls(starts)
        calls.start("alice")
        calls.start("bob")
        holder = calls.start("alice")
        calls.start("alice")
        await calls.settle()
        calls.tasks[3].cancel()
        await calls.settle()
        assert starts.waiting("alice") == 0
        holder.set()
        await calls.settle()
        calls.start("alice")  # the slot came back to the free ones
        await calls.settle()
        assert len(calls.entered) == 4

    asyncio.run(scenario())


async def _until(ready) -> None:
    while not ready():
        await asyncio.sleep(0.01)


def test_off_with_a_zero_slice():
    async def scenario() -> None:
        calls = Calls(FairStarts(slots=1, slice_s=0))
        for tenant in ["alice", "bob"] * 5:
            calls.start(tenant)
        await calls.settle()
        assert len(calls.entered) == 10
        await calls.finish()

    asyncio.run(scenario())
