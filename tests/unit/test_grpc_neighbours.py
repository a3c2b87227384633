"""A busy tenant beside a quiet one, over gRPC: a tenant ignoring its rate's
refusals is held until the time they named, and a tenant flooding calls takes
turns to start them; the quiet one is served meanwhile."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc

from runtime.agent import protocol
from tests.helpers import ManualClock, wait_for
from tests.unit.secured import status_of

EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
HAMMERING = 4


def test_a_tenant_ignoring_refusals_is_held_while_its_neighbour_is_served(secure_daemon):
    # One call per 5 s, on a clock that stands still until bob is served.
    clock = ManualClock()
    secured = secure_daemon(tenants={"alice": {"calls_per_second": 0.2, "burst": 1}}, clock=clock)
    alice, bob = secured.client("alice"), secured.client("bob")
    held = secured.daemon.daemon.core.manager.quotas.held
    a_sid, b_sid = alice.create_session().id, bob.create_session().id
    shell = {"command": "true"}
    assert alice.call(a_sid, "shell", shell).ok
    code, details = status_of(lambda: alice.call(a_sid, "shell", shell))
    assert code == EXHAUSTED and "calls_per_second quota (0.2, burst 1); retry in" in details
    with ThreadPoolExecutor(HAMMERING) as pool:
        hammering = [
            pool.submit(status_of, lambda: alice.call(a_sid, "shell", shell))
            for _ in range(HAMMERING)
        ]
        wait_for(lambda: held("alice") == HAMMERING, timeout=30)
        for _ in range(3):
            assert bob.call(b_sid, "shell", shell).ok
        assert held("alice") == HAMMERING
        assert not any(f.done() for f in hammering)
        clock.advance(5)  # the time the refusal named
        outcomes = [f.result() for f in hammering]
    # Judged at the named time: one token had come back; the rest refused again.
    assert outcomes.count(None) == 1
    assert [o[0] for o in outcomes if o is not None] == [EXHAUSTED] * (HAMMERING - 1)
    refused = [r for r in secured.audit() if r["event"] == "call" and r["code"]]
    assert [r["code"] for r in refused] == ["RESOURCE_EXHAUSTED"] * HAMMERING
    assert {r["tenant"] for r in refused} == {"alice"}


def test_beside_a_tenants_calls_waiting_for_a_turn_its_neighbour_is_served(secure_daemon):
    secured = secure_daemon(fair_start_slots=1, fair_start_slice_s=60)
    gate = threading.Event()

    async def answer(request: protocol.Exec) -> tuple[protocol.ExecResult, bytes]:
        while "wait" in request.command and not gate.is_set():
            await asyncio.sleep(0.01)
        return protocol.ExecResult(exit_code=0), b""

    core = secured.daemon.daemon.core
    core.backend.script(answer)
    waiting = core.calls.starts.waiting
    alice, bob = secured.client("alice"), secured.client("bob")
    a_sids = [alice.create_session().id for _ in range(3)]
    b_sid = bob.create_session().id
    assert bob.call(b_sid, "shell", {"command": "true"}).ok  # bob is calling too
    with ThreadPoolExecutor(3) as pool:
        # Alice's first call starts freely, her second takes the one slot, her third waits.
        flood = [pool.submit(alice.call, sid, "shell", {"command": "wait"}) for sid in a_sids]
        try:
            deadline = time.monotonic() + 30
            while waiting("alice") < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert waiting("alice") == 1
            for _ in range(3):  # nothing of bob's is running: his calls start at once
                assert bob.call(b_sid, "shell", {"command": "true"}).ok
            assert waiting("alice") == 1
        finally:
            gate.set()
        assert all(f.result().ok for f in flood)
    assert waiting("alice") == 0
