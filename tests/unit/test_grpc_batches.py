"""Batches through gRPC without an engine: read-only calls overlap, writes run
one at a time in call order, every call gets its own result, and a sandbox
lost mid-batch answers every call."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.agent import protocol
from runtime.client import Client
from runtime.sandbox.fake import Lose
from runtime.tools.registry import Registry
from runtime.tools.shell import SHELL
from tests.checks import PEEK, check_reads_overlap_and_writes_wait

SLEEP = 0.4
STAMPS = f"date +%s.%N; sleep {SLEEP}; date +%s.%N"


async def stamped(request: protocol.Exec) -> tuple[protocol.ExecResult, bytes]:
    """What STAMPS prints, in the fake sandbox."""
    start = time.time()
    if "sleep" in request.command:
        await asyncio.sleep(SLEEP)
    stamps = f"{start:.6f}\n{time.time():.6f}\n" if "sleep" in request.command else f"{start:.6f}\n"
    return protocol.ExecResult(exit_code=0), stamps.encode()


@pytest.mark.parametrize("backend", ["local", "fake"])
def test_read_only_calls_overlap_and_writes_run_one_at_a_time_in_order(make_daemon, backend):
    running = make_daemon(registry=Registry([SHELL, PEEK]), backend=backend)
    if backend == "fake":
        running.daemon.core.backend.script(stamped)
    check_reads_overlap_and_writes_wait(running.target, STAMPS)


def test_each_call_of_a_batch_gets_its_own_result(make_daemon):
    running = make_daemon(backend="fake")
    exit_codes = {"ok": 0, "fails": 3}
    running.daemon.core.backend.script(
        lambda request: (
            protocol.ExecResult(exit_code=exit_codes[request.command]),
            request.command.encode(),
        )
    )
    calls = [
        pb.ToolCall(id="a", name="shell", arguments_json='{"command": "ok"}'),
        pb.ToolCall(id="b", name="shell", arguments_json='{"command": "fails"}'),
        pb.ToolCall(id="c", name="nope", arguments_json="{}"),
        pb.ToolCall(id="d", name="shell", arguments_json="{not json"),
        pb.ToolCall(id="e", name="read_file", arguments_json='{"path": "/workspace/none"}'),
    ]
    with Client(running.target) as client, client.session() as session:
        reply = client.stub.ExecuteBatch(pb.ExecuteBatchRequest(session_id=session.id, calls=calls))
    assert [r.call_id for r in reply.results] == ["a", "b", "c", "d", "e"]
    assert [r.ok for r in reply.results] == [True, True, False, False, False]
    assert [r.error.code for r in reply.results[2:]] == [
        "UNKNOWN_TOOL",
        "INVALID_ARGUMENTS",
        "NOT_FOUND",
    ]
    assert json.loads(reply.results[1].output_json)["stdout"] == "fails"
    assert [e.command for e in running.daemon.core.backend.execs()] == ["ok", "fails"]


def test_a_sandbox_lost_mid_batch_answers_every_call_and_closes_the_session(make_daemon):
    running = make_daemon(backend="fake")

    async def die(request: protocol.Exec) -> Lose:
        await asyncio.sleep(0.2)
        return Lose("the container was killed")

    running.daemon.core.backend.script(die)
    calls = [
        pb.ToolCall(id=i, name="shell", arguments_json='{"command": "sleep 60"}') for i in "abc"
    ]
    with Client(running.target) as client:
        session = client.create_session()
        reply = client.stub.ExecuteBatch(pb.ExecuteBatchRequest(session_id=session.id, calls=calls))
        assert [r.call_id for r in reply.results] == ["a", "b", "c"]
        assert [r.error.code for r in reply.results] == ["SANDBOX_LOST"] * 3
        assert "the container was killed" in reply.results[0].error.message
        assert client.list_sessions() == []
    assert running.daemon.core.backend.sandboxes == {}
