"""A call id runs at most once per session, whatever the client repeats (real engine)."""

from __future__ import annotations

import json
import threading
import time

import grpc
import pytest

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import ToolrtRpcError
from tests.helpers import APPEND, lines

pytestmark = pytest.mark.docker


def test_a_repeated_id_returns_the_first_result_without_running_again(session):
    first = session.call("shell", {"command": f"{APPEND}; echo $RANDOM"}, call_id="c1")
    # Same arguments, other spelling: whitespace and key order do not matter.
    text = json.dumps({"timeout_s": None, "command": f"{APPEND}; echo $RANDOM"}, indent=3)
    again = session.call("shell", text, call_id="c1")
    assert first.ok and again == first
    assert lines(session) == 1


def test_the_same_id_with_other_arguments_is_invalid_arguments(session):
    assert session.call("shell", {"command": APPEND}, call_id="c1").ok
    other = session.call("shell", {"command": f"{APPEND}; {APPEND}"}, call_id="c1")
    assert other.error_code == "INVALID_ARGUMENTS" and "new id" in other.error_message
    assert lines(session) == 1


def test_a_refused_call_is_answered_the_same_way_again(session):
    bad = session.call("shell", {"command": APPEND, "bogus": 1}, call_id="c1")
    assert bad.error_code == "INVALID_ARGUMENTS" and "/bogus" in bad.error_message
    assert session.call("shell", {"command": APPEND, "bogus": 1}, call_id="c1") == bad
    assert lines(session) == 0


def test_a_repeat_while_the_first_runs_waits_for_its_result(client, session):
    results = {}

    def call(name: str) -> None:
        results[name] = client.call(
            session.id, "shell", {"command": f"{APPEND}; sleep 2; echo done"}, call_id="slow"
        )

    first = threading.Thread(target=call, args=("first",))
    first.start()
    time.sleep(0.5)
    call("second")
    first.join(30)
    assert results["first"].ok and results["second"] == results["first"]
    assert results["first"].output["stdout"] == "done\n"
    assert lines(session) == 1


def test_a_cut_off_first_attempt_is_outcome_unknown_and_never_reruns(client, session):
    arguments = {"command": f"{APPEND}; sleep 30; {APPEND}"}
    with pytest.raises(ToolrtRpcError) as err:
        client.call(session.id, "shell", arguments, call_id="cut", timeout=2)
    assert err.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    started = time.monotonic()
    retry = client.call(session.id, "shell", arguments, call_id="cut")
    assert retry.error_code == "OUTCOME_UNKNOWN", retry
    assert "may or may not have run" in retry.error_message
    assert time.monotonic() - started < 20  # answered, not run for 30 s
    # The first attempt was stopped when its client went away, and the retry
    # did not run: exactly the one line the first attempt wrote.
    assert lines(session) == 1
    assert session.shell("pgrep -c sleep || true").output["stdout"].strip() == "0"


def test_ids_are_per_session(client):
    with client.session() as one, client.session() as two:
        assert one.call("shell", {"command": APPEND}, call_id="same").ok
        assert two.call("shell", {"command": APPEND}, call_id="same").ok
        assert lines(one) == 1 and lines(two) == 1


def test_a_retried_batch_is_answered_from_the_journal(client, session):
    calls = [
        pb.ToolCall(id=f"b{i}", name="shell", arguments_json=json.dumps({"command": APPEND}))
        for i in range(3)
    ]
    request = pb.ExecuteBatchRequest(session_id=session.id, calls=calls)
    first = client.stub.ExecuteBatch(request)
    again = client.stub.ExecuteBatch(request)
    assert [r.ok for r in first.results] == [True] * 3
    assert list(again.results) == list(first.results)
    assert lines(session) == 3
