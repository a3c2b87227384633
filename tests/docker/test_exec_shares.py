"""Execs running at once, bounded per session and per tenant on the real
engine: past its share a session's (or tenant's) next Exec is refused with
the key named, while another tenant's execs run on, and an exec that ends
gives its place back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import grpc
import pytest

from runtime.auth.tokens import create_token
from runtime.client import Client, ToolrtRpcError
from runtime.client.programs import ExecStream

# A running exec and its events, read on from after `started`.
Running = tuple[ExecStream, Iterator[tuple[str, Any]]]

pytestmark = pytest.mark.docker

SHARES = {"execs_per_session": 2, "execs_per_tenant": 3}


def running(stack: ExitStack, session, argv: list[str]) -> Running:
    """An exec that runs until it is signalled, once it has started."""
    stream = stack.enter_context(session.exec_stream(argv, stdin_open=False))
    # Kept: an events iterator let go of half-closes the request stream.
    events = stream.events()
    assert next(events)[0] == "started"
    return stream, events


def refused_by(session, share: str) -> None:
    with pytest.raises(ToolrtRpcError) as refused:
        session.exec(["true"])
    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused.value.reason == "QUOTA_EXCEEDED"
    assert f"shares.{share}" in refused.value.details


def killed(exec_: Running) -> None:
    """Signal the exec and read its end: its place is free once `exit` arrives."""
    stream, events = exec_
    stream.signal("KILL")
    kinds = [kind for kind, _ in events]
    assert kinds[-1] == "exit"


def test_a_session_and_a_tenant_past_their_share_are_refused_others_run(make_daemon, tmp_path):
    tokens_file = tmp_path / "tokens"
    _, alice = create_token(tokens_file, "alice")
    _, bob = create_token(tokens_file, "bob")
    daemon = make_daemon(auth={"tokens_file": str(tokens_file)}, shares=SHARES)
    metrics = daemon.daemon.core.obs.metrics
    with (
        Client(daemon.target, token=alice) as hers,
        Client(daemon.target, token=bob) as his,
        hers.session() as first,
        hers.session() as second,
        his.session() as bobs,
        ExitStack() as stack,
    ):
        full = [running(stack, first, ["sleep", "1000"]) for _ in range(2)]
        bobs_running = running(stack, bobs, ["sleep", "1001"])
        refused_by(first, "execs_per_session")
        # Bob's session runs execs beside Alice's full one.
        assert bobs.exec(["echo", "served"]).stdout == b"served\n"
        # Alice's other session takes her tenant's last place, then is refused.
        running(stack, second, ["sleep", "1002"])
        refused_by(second, "execs_per_tenant")
        # An exec ending gives its place back, in its session and its tenant.
        killed(full[0])
        assert first.exec(["echo", "again"]).stdout == b"again\n"
        killed(bobs_running)
    shares = metrics.totals(metrics.share_refusals, "share")
    assert shares["execs_per_session"] == 1 and shares["execs_per_tenant"] == 1
