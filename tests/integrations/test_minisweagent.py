"""mini-swe-agent's own loop (`DefaultAgent` with its deterministic test
model) fixing a bug in a repository seeded in a toolrt session."""

from __future__ import annotations

import os
import signal

import pytest
import yaml
from minisweagent import package_dir
from minisweagent.agents.default import DefaultAgent
from minisweagent.environments import get_environment
from scripted import DeterministicModel, make_output

from runtime.client import Client
from runtime.integrations import commands
from runtime.integrations.minisweagent import SandboxGone, ToolrtEnvironment

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")

CLASS_PATH = "runtime.integrations.minisweagent.ToolrtEnvironment"
BUGGY = "def add(a, b):\n    return a - b\n"
TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def seed_repository(env: ToolrtEnvironment) -> None:
    for name, text in {"calc.py": BUGGY, "test_calc.py": TESTS}.items():
        assert commands.upload(env.session, f"/workspace/repo/{name}", text.encode()) is None


def scripted(*commands_: str) -> DeterministicModel:
    outputs = [make_output(f"step {i}", [{"command": c}]) for i, c in enumerate(commands_)]
    return DeterministicModel(outputs=outputs)


def test_default_agent_fixes_a_bug_named_by_class_path_in_a_config() -> None:
    config = yaml.safe_load((package_dir / "config" / "default.yaml").read_text())
    config["environment"] = {"environment_class": CLASS_PATH, "cwd": "/workspace/repo"}
    env = get_environment(config["environment"])
    assert isinstance(env, ToolrtEnvironment)
    try:
        seed_repository(env)
        # -B: the fix is the same size as the bug and lands within the second,
        # so a cached .pyc would look current (as in any Python).
        model = scripted(
            "python3 -B -m pytest -q",
            "sed -i 's/a - b/a + b/' calc.py",
            "python3 -B -m pytest -q",
            "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat calc.py",
        )
        agent = DefaultAgent(model, env, **config["agent"])
        outcome = agent.run("make test_calc.py pass")

        assert outcome["exit_status"] == "Submitted"
        assert "return a + b" in outcome["submission"]
        observations = [m["content"] for m in agent.messages if m["role"] == "user"][1:]
        assert "<returncode>1</returncode>" in observations[0]
        assert "1 failed" in observations[0]
        assert "<returncode>0</returncode>" in observations[2]
        assert "1 passed" in observations[2]
        fixed = commands.download(env.session, "/workspace/repo/calc.py")
        assert fixed == b"def add(a, b):\n    return a + b\n"
        assert agent.serialize()["info"]["config"]["environment"]["session_id"] == env.session.id
        # The prompts describe the sandbox, not the machine the harness runs on.
        assert env.get_template_vars()["node"] == "sandbox"
    finally:
        env.cleanup()


def test_a_command_over_its_timeout_is_the_harness_timeout_and_is_killed() -> None:
    with ToolrtEnvironment(timeout=1) as env:
        result = env.execute({"command": "echo started; sleep 30"})
        assert result["returncode"] == -1
        assert "timed out after 1 seconds" in result["exception_info"]
        assert result["output"] == "started\n"
        # Killed, not left running in the background.
        assert env.execute({"command": "pgrep -c sleep || true"})["output"] == "0\n"


def test_a_failing_command_is_a_result_and_a_refused_one_an_exception_info() -> None:
    with ToolrtEnvironment() as env:
        result = env.execute({"command": "echo out; echo err >&2; exit 3"})
        assert result == {"output": "out\nerr\n", "returncode": 3, "exception_info": ""}
        refused = env.execute({"command": "printf 'a\x00b'"})
        assert refused["returncode"] == -1
        assert "INVALID_ARGUMENTS" in refused["exception_info"]


def test_a_session_gone_ends_the_run_with_sandbox_gone(client: Client) -> None:
    env = ToolrtEnvironment()
    env.get_template_vars()  # the prompts are rendered while the session lives
    client.close_session(env.session.id)
    agent = DefaultAgent(scripted("true"), env, system_template="s", instance_template="t")
    with pytest.raises(SandboxGone):
        agent.run("anything")
    assert agent.messages[-1]["extra"]["exit_status"] == "SandboxGone"
    env.cleanup()


class InterruptedModel(DeterministicModel):
    """Ctrl-C while the model thinks, after a first command ran."""

    def query(self, messages: list[dict[str, str]], **kwargs: object) -> dict:
        if self.current_index >= 0:
            raise KeyboardInterrupt
        return super().query(messages, **kwargs)


def test_a_cancelled_run_closes_the_session(client: Client) -> None:
    model = InterruptedModel(outputs=[make_output("", [{"command": "true"}])])
    with pytest.raises(KeyboardInterrupt), ToolrtEnvironment() as env:
        DefaultAgent(model, env, system_template="s", instance_template="t").run("x")
    assert env.session.id not in {s.id for s in client.list_sessions() if s.state == "ready"}


def test_a_given_session_is_used_and_left_open(client: Client) -> None:
    with client.session() as session:
        env = ToolrtEnvironment(session_id=session.id)
        assert env.execute({"command": "echo hi"})["output"] == "hi\n"
        env.cleanup()
        assert client.get_session(session.id).state == "ready"


def test_ctrl_c_during_a_command_closes_the_session(client: Client) -> None:
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    env = ToolrtEnvironment(timeout=120)
    try:
        signal.alarm(1)
        with pytest.raises(KeyboardInterrupt):
            env.execute({"command": "sleep 100"})
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert client.get_session(env.session.id).state != "ready"
