"""Fuzz every tool's arguments against the real daemon and engine.

Every answer is a ToolResult with a documented code (never INTERNAL) or a
documented gRPC status, the daemon logs no unexpected error, and the session
still runs a plain command afterwards. Budgets: tests/fuzzing.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.core import default_registry
from tests.fuzzing import (
    call_ids,
    check_result,
    drawn,
    fuzz_settings,
    json_values,
    numbers,
    one_in,
    paths,
    raw_json_text,
    rpc,
    short_text,
    streamed,
    text,
    to_json,
    watched,
)

pytestmark = [pytest.mark.docker, pytest.mark.fuzz]

TOOLS = {tool["name"]: tool for tool in default_registry().catalog()}
# A short call timeout bounds what a drawn command can cost.
LIMITS = {"call_timeout_s": 5, "output_cap_bytes": 64 << 10}
# The hostile configuration: the file tools may read anywhere.
ALLOWLIST = {"read_roots": ["/"], "write_roots": ["/workspace", "/tmp"]}

commands = st.one_of(
    st.sampled_from(
        ["true", "echo hi", "pwd", "cat", "exit 3", "printf '\\xff\\xfe\\x00'", "env"]
        + ["yes | head -c 3000000", "kill -9 $$", "sleep 0.3", "cd /tmp", "cd /nonexistent"]
        + ["export X=1", "unset PATH", "exec 1>&-", "ls -R /workspace | head", "umask 777"]
        + ["mkdir -p /workspace/d && cd /workspace/d", "rm -rf /workspace/*", "read x", "exec 0<&-"]
        + ["mkdir -p /workspace/" + "d/" * 1100, "ln -s / /workspace/root", "mkfifo /workspace/f"]
    ),
    text,
)
regexes = st.one_of(
    st.sampled_from(["(a+)+$", "Listening", "[", "(?<=a*)b", "x" * 1000, "\\", "(?P<n>", ".*"]),
    text,
)
# Plausible values per argument name (so that validation lets many through),
# always mixed with values of any JSON type.
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "path": paths,
    "cwd": paths,
    "command": commands,
    "content": text,
    "old_string": text,
    "new_string": text,
    "stdin": text,
    "offset": numbers,
    "limit": numbers,
    "timeout_s": numbers,
    "idle_timeout_s": numbers,
    "on_idle": st.sampled_from(["background", "kill"]) | short_text,
    "env": st.dictionaries(text, text, max_size=4),
    "args": st.lists(text, max_size=70),
    "process_id": st.sampled_from(["p1", "p2", "p0", "p999999999999"]) | text,
    "wait_for": regexes,
}


def value_for(name: str) -> st.SearchStrategy[Any]:
    plausible = PLAUSIBLE.get(name)
    if plausible is None:
        return json_values
    return one_in(4).flatmap(lambda rare: json_values if rare else plausible)


@st.composite
def arguments_json(draw: st.DrawFn, tool: str) -> str:
    """The arguments of `tool` as a model might write them, or worse."""
    if draw(one_in(10)):
        return draw(raw_json_text)
    schema = TOOLS[tool]["parameters"] if tool in TOOLS else {"properties": {}}
    required = set() if draw(one_in(10)) else set(schema.get("required", ()))
    optional = sorted(set(schema["properties"]) - required)
    if optional and draw(st.booleans()):
        # Focused: the required arguments and one optional one, so that most
        # calls pass validation and reach the sandbox.
        optional = [draw(st.sampled_from(optional))]
    args = draw(
        st.fixed_dictionaries(
            {f: value_for(f) for f in required},
            optional={f: value_for(f) for f in optional},
        )
    )
    if draw(one_in(6)):
        args.update(draw(st.dictionaries(short_text, json_values, min_size=1, max_size=3)))
    return to_json(args)


real_names = st.sampled_from(sorted(TOOLS))
odd_names = st.sampled_from(["", "Shell", "shell\x00", "shell ", "read_file" * 1000, "😀"])
tool_names = one_in(5).flatmap(lambda rare: odd_names | short_text if rare else real_names)


@st.composite
def tool_calls(draw: st.DrawFn) -> pb.ToolCall:
    name = draw(tool_names)
    return pb.ToolCall(id=draw(call_ids), name=name, arguments_json=draw(arguments_json(name)))


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
