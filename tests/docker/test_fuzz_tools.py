"""Fuzz every tool's arguments against the real daemon and engine.

Every answer is a ToolResult with a documented code (never INTERNAL) or a
documented gRPC status, the daemon logs no unexpected error, and the session
still runs a plain command afterwards. Budgets: tests/fuzzing.py.
"""

from __future__ import annotations

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from tests.fuzzing import (
    TOOLS,
    check_result,
    drawn,
    fuzz_settings,
    rpc,
    streamed,
    tool_calls,
    watched,
)

pytestmark = [pytest.mark.docker, pytest.mark.fuzz]

# A short call timeout bounds what a drawn command can cost.
LIMITS = {"call_timeout_s": 5, "output_cap_bytes": 64 << 10}
# The hostile configuration: the file tools may read anywhere.
ALLOWLIST = {"read_roots": ["/"], "write_roots": ["/workspace", "/tmp"]}


@pytest.fixture
def fuzzed(make_daemon, docker_client, caplog):
    """A session of the hostile configuration, watched (see `watched`)."""
    with watched(
        make_daemon(allowlist_max_roots=["/"]),
        docker_client,
        caplog,
        limits=LIMITS,
        allowlist=ALLOWLIST,
    ) as pair:
        yield pair


@given(drawn_call=drawn(tool_calls()))
@fuzz_settings(140)
def test_every_tool_answers_any_arguments_with_a_documented_code(fuzzed, drawn_call):
    client, session = fuzzed
    call = drawn_call.value
    answer = rpc(client.stub.Execute, pb.ExecuteRequest(session_id=session.id, call=call))
    if isinstance(answer, pb.ToolResult):
        tool = call.name if call.name in TOOLS else "(other name)"
        event(f"{tool}: {check_result(answer, call.id) or 'ok'}")
    else:
        event(f"status {answer.name}")


@given(drawn_calls=drawn(st.lists(tool_calls(), max_size=12)), stream=st.booleans())
@fuzz_settings(20)
def test_batches_and_streams_answer_every_call(fuzzed, drawn_calls, stream):
    client, session = fuzzed
    calls = drawn_calls.value
    if stream and calls:
        request = pb.ExecuteRequest(session_id=session.id, call=calls[0])
        events = streamed(client.stub.ExecuteStream, request)
        if isinstance(events, list):
            results = [e.result for e in events if e.WhichOneof("event") == "result"]
            assert len(results) == 1 and events[-1].HasField("result")
            check_result(results[0], calls[0].id)
        return
    request = pb.ExecuteBatchRequest(session_id=session.id, calls=calls)
    answer = rpc(client.stub.ExecuteBatch, request)
    if isinstance(answer, pb.ExecuteBatchResponse):
        assert [r.call_id for r in answer.results] == [c.id for c in calls]
        for result in answer.results:
            check_result(result)
