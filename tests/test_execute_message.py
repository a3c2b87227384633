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

from examples import _story, anthropic_loop, gemini_loop, openai_loop
from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import ToolrtRpcError
from runtime.dialects.registry import DIALECTS
from runtime.tools.base import Tool
from runtime.tools.registry import Registry
from runtime.tools.shell import SHELL, ShellArgs, run_shell
from tests import provider_types as sdk
from tests.conftest import containers_of

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


# -- the examples' loops, replaying a recorded task end to end ---------------
def payloads(dialect: str, conversation: list[Any]) -> dict[str, Any]:
    """Every tool result in a conversation: call id → (payload, is_error)."""
    found: dict[str, Any] = {}
    for message in conversation:
        if not isinstance(message, dict):
            continue  # an SDK object the loop kept as is (a Gemini model turn)
        if dialect == "anthropic" and message["role"] == "user":
            for block in message["content"] if isinstance(message["content"], list) else []:
                found[block["tool_use_id"]] = json.loads(block["content"]), block.get("is_error")
        elif dialect == "openai" and message["role"] == "tool":
            found[message["tool_call_id"]] = json.loads(message["content"]), None
        elif dialect == "gemini" and message["role"] == "user":
            for part in message["parts"]:
                if "functionResponse" in part:
                    response = part["functionResponse"]
                    found[response["id"]] = response["response"], "error" in response["response"]
    return found


LOOPS = {"anthropic": anthropic_loop, "openai": openai_loop, "gemini": gemini_loop}
PREFIX = {"anthropic": "toolu_", "openai": "call_", "gemini": "fc_"}


@pytest.mark.parametrize("dialect", sorted(LOOPS))
def test_example_loop_replays_a_multi_turn_task(session, dialect):
    replay_and_check(session, dialect)


def replay_and_check(session: Any, dialect: str) -> None:
    """The example loop of `dialect` replays the recorded task in `session`."""
    loop = LOOPS[dialect]
    conversation = loop.agent_loop(session, loop.replay(), _story.TASK)
    results = payloads(dialect, conversation)
    p = PREFIX[dialect]
    assert sorted(results) == sorted(f"{p}{i}" for i in "12345")
    listing, _ = results[f"{p}1"]
    assert listing.get("output", listing)["stdout"] == "calc.py\n"
    added, _ = results[f"{p}3"]
    assert added.get("output", added)["stdout"] == "5\n"  # state carried across turns
    bad, bad_is_error = results[f"{p}4"]
    assert bad["error"]["code"] == "INVALID_ARGUMENTS" and "/command" in bad["error"]["message"]
    unknown, _ = results[f"{p}5"]
    assert unknown["error"]["code"] == "UNKNOWN_TOOL"
    assert "available tools: shell" in unknown["error"]["message"]
    if dialect == "anthropic":
        assert bad_is_error is True
    last = conversation[-1]
    assert _story.FINAL in json.dumps(last if isinstance(last, dict) else last.model_dump())


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


# -- batches ----------------------------------------------------------------
# A read-only tool for the test: the shell, marked read-only, so that two
# calls of one batch can show they overlap inside the sandbox.
PEEK = Tool(
    name="peek", description="Read-only shell.", arguments=ShellArgs, run=run_shell, read_only=True
)
STAMPS = "date +%s.%N; sleep 1.5; date +%s.%N"


def spans(results: list[Any]) -> list[tuple[float, float]]:
    return [tuple(map(float, r.output["stdout"].split())) for r in results]  # type: ignore[misc]


def test_read_only_calls_overlap_and_side_effects_run_one_at_a_time(make_daemon):
    running = make_daemon(registry=Registry([SHELL, PEEK]))
    check_reads_overlap_and_writes_wait(running.target, STAMPS)


def check_reads_overlap_and_writes_wait(target: str, stamps: str) -> None:
    """A batch of peeks and shells on a daemon serving both: each `stamps`
    command prints when it started and ended."""
    from runtime.client import Client

    with Client(target) as client, client.session() as session:
        message = [
            {"id": "r1", "name": "peek", "arguments": {"command": stamps}},
            {"id": "r2", "name": "peek", "arguments": {"command": stamps}},
            {"id": "bad", "name": "peek", "arguments": {"command": ""}},
            {"id": "w1", "name": "shell", "arguments": {"command": stamps}},
            {"id": "w2", "name": "shell", "arguments": {"command": stamps}},
            {"id": "r3", "name": "peek", "arguments": {"command": "date +%s.%N"}},
        ]
        _, results = session.execute_message("neutral", message)
    assert [r.call_id for r in results] == ["r1", "r2", "bad", "w1", "w2", "r3"]
    assert results[2].error_code == "INVALID_ARGUMENTS"  # and the others still ran
    (r1, r2), (w1, w2) = spans(results[:2]), spans(results[3:5])
    assert r2[0] < r1[1] and r1[0] < r2[1]  # the two reads overlapped
    assert max(r1[1], r2[1]) <= w1[0]  # the write waited for the reads before it
    assert w1[1] <= w2[0]  # writes one at a time, in call order
    assert w2[1] <= float(results[5].output["stdout"])  # a later read saw the writes done


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
