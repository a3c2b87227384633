"""One tenant's large arguments cannot take the parser from another: they
are parsed one at a time per tenant, and a tenant with too many waiting is
refused while the others' calls, small and large, go on being answered."""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import grpc

from runtime.client import ToolrtRpcError
from runtime.tools import validation

FLOOD = "flood-mark"
LARGE = 100 << 10  # past cpu.INLINE_BYTES: parsed on a worker thread


def test_a_tenant_flooding_large_arguments_waits_its_turn_and_others_are_served(
    secure_daemon, monkeypatch
):
    secured = secure_daemon(shares={"large_arguments_waiting": 2})
    release = threading.Event()
    load = validation.load_json

    def held(text: str) -> Any:
        # Alice's parses hang until released: her turn stays taken, and
        # each worker thread holding one of them is lost to everyone else.
        if FLOOD in text[:64]:
            release.wait(60)
        return load(text)

    monkeypatch.setattr(validation, "load_json", held)
    alice, bob = secured.client("alice"), secured.client("bob")
    heavy = {"stdin": FLOOD + "a" * LARGE, "command": "true"}
    with (
        alice.session() as flooding,
        bob.session() as other,
        ThreadPoolExecutor(8) as threads,
    ):
        try:
            calls = [threads.submit(flooding.call, "shell", heavy) for _ in range(5)]
            # One parsing, two waiting: the two beyond are refused at once.
            refused = finished(calls, 2)
            for call in refused:
                error = call.exception()
                assert isinstance(error, ToolrtRpcError), error
                assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert "shares.large_arguments_waiting = 2" in error.details
            # Bob is served meanwhile, his large arguments too.
            small = other.call("shell", {"command": "true"})
            large = other.call("shell", {"stdin": "b" * LARGE, "command": "true"})
            assert small.ok and large.ok, (small, large)
            assert bob.get_session(other.id).id == other.id
            assert not any(call.done() for call in calls if call not in refused)
        finally:
            release.set()
        # Alice's waiting calls ran, in turn.
        assert all(call.result(60).ok for call in calls if call not in refused)
    totals = secured.daemon.daemon.core.obs.metrics.totals
    shares = totals(secured.daemon.daemon.core.obs.metrics.share_refusals, "share")
    assert shares == {"argument_parses": 2}


def finished(calls: list[Future[Any]], count: int) -> list[Future[Any]]:
    """The first `count` of `calls` to finish (a minute at most)."""
    done: set[Future[Any]] = set()
    pending = set(calls)
    while len(done) < count and pending:
        now, pending = wait(pending, timeout=60, return_when=FIRST_COMPLETED)
        assert now, f"only {len(done)} calls finished; {count} were expected to"
        done |= now
    return list(done)
