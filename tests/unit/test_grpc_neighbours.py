"""A tenant that ignores its rate's refusals, beside one that does not, over gRPC:
the first is held until the time its refusal named, the second is served meanwhile."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import grpc

from runtime.sessions import quotas
from tests.unit.secured import status_of

EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
HAMMERING = 4


def test_a_tenant_ignoring_refusals_is_held_while_its_neighbour_is_served(
    secure_daemon, monkeypatch
):
    # One call per 5 s: its held calls surely wait while bob calls.
    monkeypatch.setattr(quotas, "MAX_HOLD_S", 60.0)
    secured = secure_daemon(tenants={"alice": {"calls_per_second": 0.2, "burst": 1}})
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
        deadline = time.monotonic() + 30
        while held("alice") < HAMMERING and time.monotonic() < deadline:
            time.sleep(0.01)
        assert held("alice") == HAMMERING
        for _ in range(3):
            assert bob.call(b_sid, "shell", shell).ok
        assert held("alice") == HAMMERING
        outcomes = [f.result() for f in hammering]
    # Judged at the named time: one token had come back; the rest refused again.
    assert outcomes.count(None) == 1
    assert [o[0] for o in outcomes if o is not None] == [EXHAUSTED] * (HAMMERING - 1)
    refused = [r for r in secured.audit() if r["event"] == "call" and r["code"]]
    assert [r["code"] for r in refused] == ["RESOURCE_EXHAUSTED"] * HAMMERING
    assert {r["tenant"] for r in refused} == {"alice"}
