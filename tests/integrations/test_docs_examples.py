"""The examples of docs/integrations.md, run as written: the test supplies
only `model`, a scripted stand-in for the reader's own."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from agents.testing import ScriptedModel, assistant_message, function_call
from docs_page import blocks, run_example
from langchain_core.messages import AIMessage
from minisweagent.environments import get_environment
from scripted import DeterministicModel, ScriptedChatModel, make_output, tool_call

from runtime.integrations.minisweagent import ToolrtEnvironment


def test_the_mini_swe_agent_config_names_the_environment() -> None:
    [config] = blocks("mini-swe-agent", "yaml")
    env = get_environment(yaml.safe_load(config)["environment"])
    try:
        assert isinstance(env, ToolrtEnvironment)
        assert env.execute({"command": "pwd"})["output"] == "/workspace\n"
    finally:
        env.cleanup()


def test_the_mini_swe_agent_example(capsys: pytest.CaptureFixture[str]) -> None:
    [example] = blocks("mini-swe-agent", "python")
    model = DeterministicModel(
        outputs=[
            make_output("fix", [{"command": "sed -i 's/1 - 1/1 + 1/' repo/main.py"}]),
            make_output(
                "done",
                [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && python3 repo/main.py"}],
            ),
        ]
    )
    assert run_example(example, model, capsys) == "Submitted 2\n\n"


def test_the_deep_agents_example(capsys: pytest.CaptureFixture[str]) -> None:
    [example] = blocks("LangChain Deep Agents", "python")
    script = [
        tool_call("execute", 1, command="python3 /workspace/hello.py"),
        AIMessage(content="It printed: hello from toolrt"),
    ]
    out = run_example(example, ScriptedChatModel(messages=iter(script)), capsys)
    assert out.startswith("It printed: hello from toolrt - in session ")


def test_the_openai_agents_example(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The runner leaves a workspace tar in the SDK's store under HOME: a temporary one.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    [example] = blocks("OpenAI Agents SDK", "python")
    model = ScriptedModel(
        [
            [function_call("exec_command", {"cmd": "python3 --version"}, call_id="c1")],
            [assistant_message("It is Python 3")],
        ]
    )
    assert run_example(example, model, capsys) == "It is Python 3\n"
    assert "Python 3." in str(model.calls[-1].input)
