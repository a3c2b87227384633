"""Provider messages through ExecuteMessage into the real agent (local backend)
and back in the provider's own shapes, checked against its SDK types."""

from __future__ import annotations

import json

import pytest

from tests import provider_types as sdk
from tests.checks import LOOPS, replay_and_check


@pytest.fixture
def sandbox_backend() -> str:
    return "local"


@pytest.mark.parametrize("dialect", sorted(LOOPS))
def test_an_example_loop_replays_its_multi_turn_task(session, dialect):
    replay_and_check(session, dialect)


def test_openai_round_trip(session):
    message = sdk.openai_message(
        ("call_1", "shell", json.dumps({"command": "echo one > f.txt; cat f.txt"})),
        ("call_2", "read_file", json.dumps({"path": "f.txt"})),
        ("call_3", "read_file", json.dumps({"path": "/etc/shadow"})),
    )
    rendered, results = session.execute_message("openai", message.model_dump())
    sdk.check_openai_results(rendered)
    assert [m["tool_call_id"] for m in rendered] == ["call_1", "call_2", "call_3"]
    one, two, three = (json.loads(m["content"]) for m in rendered)
    assert one["stdout"] == "one\n" and two["content"] == "one\n"
    assert three["error"]["code"] == "PATH_DENIED"
    assert [r.ok for r in results] == [True, True, False]


def test_anthropic_round_trip(session):
    message = sdk.anthropic_message(
        ("toolu_a", "shell", {"command": "echo hi >&2; exit 1"}),
        ("toolu_b", "shell", {"command": 5}),
    )
    rendered, results = session.execute_message("anthropic", message.model_dump())
    sdk.check_anthropic_results(rendered)
    first, second = rendered["content"]
    assert first["tool_use_id"] == "toolu_a" and not first.get("is_error")
    assert json.loads(first["content"])["stderr"] == "hi\n"
    assert second["tool_use_id"] == "toolu_b" and second["is_error"] is True
    assert results[0].output["exit_code"] == 1 and results[1].error_code == "INVALID_ARGUMENTS"
