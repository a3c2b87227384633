"""Provider messages through the daemon into a real sandbox, and back."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import grpc
import pytest
from openai.types.responses import ResponseInputParam
from pydantic import TypeAdapter

from examples import _story
from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import ToolrtRpcError
from runtime.dialects.registry import DIALECTS
from runtime.tools.registry import Registry
from runtime.tools.shell import SHELL
from tests import provider_types as sdk
from tests.checks import LOOPS, PEEK, STAMPS, check_reads_overlap_and_writes_wait, replay_and_check
from tests.helpers import containers_of

pytestmark = pytest.mark.docker


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_list_tools_in_every_dialect_is_what_the_sdk_accepts(client, dialect):
    tools = client.list_tools(dialect)
    if dialect != "neutral":
        sdk.check_catalog(dialect, tools)
    assert json.dumps(tools).count('"shell"') == 1


def test_unknown_dialect_is_invalid_argument(client):
    with pytest.raises(ToolrtRpcError) as caught:
        client.list_tools("claude")
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        "known: neutral, openai, openai-responses, anthropic, gemini, mcp" in caught.value.details
    )


@pytest.mark.parametrize("dialect", sorted(LOOPS))
def test_example_loop_replays_a_multi_turn_task(session, dialect):
    replay_and_check(session, dialect)


def test_openai_responses_transcript(session):
    items: list[Any] = [{"role": "user", "content": _story.TASK}]
    for turn in _story.TURNS:
        output = sdk.responses_output(*((f"call_{i}", n, json.dumps(a)) for i, n, a in turn))
        items += [item.model_dump(exclude_none=True) for item in output]
        rendered, results = session.execute_message(
            "openai-responses", [item.model_dump() for item in output]
        )
        sdk.check_responses_results(rendered)
        assert [r.call_id for r in results] == [f"call_{i}" for i, _, _ in turn]
        items += rendered
    TypeAdapter(ResponseInputParam).validate_python(items)
    outputs = {i["call_id"]: json.loads(i["output"]) for i in items if "output" in i}
    assert outputs["call_3"]["stdout"] == "5\n"
    assert outputs["call_4"]["error"]["code"] == "INVALID_ARGUMENTS"


def test_mcp_batch_of_tools_call_requests(session):
    batch = [
        sdk.mcp_request(1, "shell", {"command": "echo one"}),
        sdk.mcp_request("two", "shell", {"command": "exit 3"}),
        sdk.mcp_request(3, "shell", {"cwd": "/workspace"}),
    ]
    rendered, results = session.execute_message("mcp", batch)
    one, two, three = sdk.check_mcp_results(rendered)
    assert [r.call_id for r in results] == ["1", "two", "3"]
    assert not one.is_error and one.structured_content["stdout"] == "one\n"
    assert not two.is_error and two.structured_content["exit_code"] == 3
    assert three.is_error and "/command" in three.content[0].text


def test_anthropic_sdk_message_results_validate(session):
    message = sdk.anthropic_message(("toolu_a", "shell", {"command": "echo hi >&2; exit 1"}))
    rendered, results = session.execute_message("anthropic", message.model_dump())
    sdk.check_anthropic_results(rendered)
    assert results[0].ok and results[0].output["stderr"] == "hi\n"


def test_gemini_snake_case_dump_without_ids(session):
    content = sdk.gemini_content((None, "shell", {"command": "echo g"}))
    rendered, results = session.execute_message("gemini", content.model_dump())
    parsed = sdk.check_gemini_results(rendered)
    assert parsed.parts[0].function_response.response == {"output": results[0].output}
    assert results[0].output["stdout"] == "g\n"


def test_neutral_message(session):
    message = [{"id": "n1", "name": "shell", "arguments": {"command": "echo n"}}]
    rendered, results = session.execute_message("", message)
    assert rendered[0]["call_id"] == "n1" and rendered[0]["output"]["stdout"] == "n\n"
    assert rendered[0]["error"] is None and results[0].ok


def test_bad_messages_are_invalid_argument_and_the_daemon_keeps_serving(client, session):
    cases = [
        ("anthropic", "{not json", "not valid JSON"),
        ("openai", {"tool_calls": [{"function": {"name": "shell"}}]}, "/tool_calls/0/id"),
        ("gemini", {"parts": [{"functionCall": {"args": {}}}]}, "/parts/0/functionCall/name"),
        ("klingon", [], "unknown dialect"),
        ("neutral", [{"id": "x", "name": "shell"}, {"id": "x", "name": "shell"}], "duplicate"),
    ]
    for dialect, message, expected in cases:
        with pytest.raises(ToolrtRpcError) as caught:
            session.execute_message(dialect, message)
        assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert expected in caught.value.details
    with pytest.raises(ToolrtRpcError) as caught:
        client.execute_message("no-such-session", "neutral", [])
    assert caught.value.code == grpc.StatusCode.NOT_FOUND
    assert session.shell("echo still").output["stdout"] == "still\n"


def test_read_only_calls_overlap_and_side_effects_run_one_at_a_time(make_daemon):
    running = make_daemon(registry=Registry([SHELL, PEEK]))
    check_reads_overlap_and_writes_wait(running.target, STAMPS)


def test_a_replayed_message_never_runs_twice(session):
    message = sdk.openai_message(
        ("call_x", "shell", json.dumps({"command": "echo run >> /workspace/log; wc -l < log"}))
    ).model_dump()
    first, _ = session.execute_message("openai", message)
    again, _ = session.execute_message("openai", message)  # a retry after a lost response
    assert again == first
    assert session.shell("cat /workspace/log").output["stdout"] == "run\n"


def test_execute_batch_answers_every_call_when_the_sandbox_dies_mid_batch(
    daemon, client, docker_client
):
    session = client.create_session()
    container = docker_client.containers.get(f"toolrt-{session.id}")
    threading.Timer(1.0, container.kill).start()
    calls = [
        pb.ToolCall(id="a", name="shell", arguments_json='{"command": "sleep 60"}'),
        pb.ToolCall(id="b", name="shell", arguments_json='{"command": "echo never"}'),
        pb.ToolCall(id="c", name="shell", arguments_json='{"command": "echo never"}'),
    ]
    reply = client.stub.ExecuteBatch(pb.ExecuteBatchRequest(session_id=session.id, calls=calls))
    assert [r.call_id for r in reply.results] == ["a", "b", "c"]
    assert [r.error.code for r in reply.results] == ["SANDBOX_LOST"] * 3
    # The session is closed and its container removed.
    deadline = time.monotonic() + 30
    while containers_of(docker_client, daemon.instance) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not containers_of(docker_client, daemon.instance)
    assert not client.list_sessions()
