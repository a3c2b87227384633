"""A call id runs at most once per session, without an engine: repeats answer
from the journal, and a first attempt cut off by its client is OUTCOME_UNKNOWN."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.agent import protocol
from runtime.client import Client, ToolrtRpcError
from tests import provider_types as sdk
from tests.helpers import APPEND, lines


@pytest.fixture
def sandbox_backend() -> str:
    return "local"


def test_a_repeated_id_answers_from_the_journal(session):
    first = session.call("shell", {"command": f"{APPEND}; echo $RANDOM"}, call_id="c1")
    text = json.dumps({"timeout_s": None, "command": f"{APPEND}; echo $RANDOM"}, indent=3)
    again = session.call("shell", text, call_id="c1")
    assert first.ok and again == first
    other = session.call("shell", {"command": "true"}, call_id="c1")
    assert other.error_code == "INVALID_ARGUMENTS" and "new id" in other.error_message
    assert lines(session) == 1


def test_a_replayed_provider_message_never_runs_twice(session):
    message = sdk.openai_message(("call_x", "shell", json.dumps({"command": APPEND})))
    message = message.model_dump()
    first, _ = session.execute_message("openai", message)
    again, _ = session.execute_message("openai", message)
    assert again == first
    assert lines(session) == 1


def test_a_retried_batch_runs_nothing_again(make_daemon):
    running = make_daemon(backend="fake")
    calls = [pb.ToolCall(id=f"b{i}", name="shell", arguments_json='{"command": "x"}') for i in "12"]
    with Client(running.target) as client, client.session() as session:
        request = pb.ExecuteBatchRequest(session_id=session.id, calls=calls)
        first = client.stub.ExecuteBatch(request)
        again = client.stub.ExecuteBatch(request)
    assert [r.ok for r in first.results] == [True, True]
    assert list(again.results) == list(first.results)
    assert len(running.daemon.core.backend.execs()) == 2


def test_a_cut_off_first_attempt_is_outcome_unknown(make_daemon):
    running = make_daemon(backend="fake")
    started: list[str] = []

    async def slow(request: protocol.Exec) -> tuple[protocol.ExecResult, bytes]:
        started.append(request.call_id)
        await asyncio.sleep(30)
        return protocol.ExecResult(exit_code=0), b""

    running.daemon.core.backend.script(slow)
    with Client(running.target) as client, client.session() as session:
        with pytest.raises(ToolrtRpcError) as err:
            client.call(session.id, "shell", {"command": "x"}, call_id="cut", timeout=0.5)
        assert err.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        retry = client.call(session.id, "shell", {"command": "x"}, call_id="cut", timeout=10)
    assert retry.error_code == "OUTCOME_UNKNOWN", retry
    assert "may or may not have run" in retry.error_message
    assert started == ["cut"]  # the retry did not run it again


def test_a_cut_off_first_attempt_is_stopped_in_the_sandbox(client, session):
    arguments = {"command": f"{APPEND}; sleep 30; {APPEND}"}
    with pytest.raises(ToolrtRpcError) as err:
        client.call(session.id, "shell", arguments, call_id="cut", timeout=1)
    assert err.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert client.call(session.id, "shell", arguments, call_id="cut").error_code == (
        "OUTCOME_UNKNOWN"
    )
    assert lines(session) == 1
    assert session.shell("pgrep -c sleep || true").output["stdout"].strip() == "0"
