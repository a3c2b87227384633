"""Checks of whole-message behaviour shared by the Docker suite and the
local/fake-backend suite: the example loops' replays, and batch ordering."""

from __future__ import annotations

import json
from typing import Any

from examples import _story, anthropic_loop, gemini_loop, openai_loop
from runtime.tools.base import Tool
from runtime.tools.shell import ShellArgs, run_shell


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


# -- batches ----------------------------------------------------------------
# A read-only tool for the test: the shell, marked read-only, so that two
# calls of one batch can show they overlap inside the sandbox.
PEEK = Tool(
    name="peek", description="Read-only shell.", arguments=ShellArgs, run=run_shell, read_only=True
)


STAMPS = "date +%s.%N; sleep 1.5; date +%s.%N"


def spans(results: list[Any]) -> list[tuple[float, float]]:
    return [tuple(map(float, r.output["stdout"].split())) for r in results]  # type: ignore[misc]


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
