"""A Deep Agent (`create_deep_agent`) with a scripted chat model fixing a bug
in a ToolrtSandbox, and the sandbox's own promises: timeouts, a lost session,
cancellation, coming back to a session by id, its label."""

from __future__ import annotations

import asyncio

import pytest
from deepagents import create_deep_agent
from langchain_core.messages import AIMessage, ToolMessage
from scripted import ScriptedChatModel, tool_call

from runtime.client import Client
from runtime.integrations.connection import harness_sessions
from runtime.integrations.deepagents import SandboxGone, ToolrtSandbox, get_or_create_sandbox

BUGGY = "def add(a, b):\n    return a - b\n"
TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
# -B: the fix is the same size as the bug and lands within the second, so
# a cached .pyc would look current (as in any Python, sandboxed or not).
RUN_TESTS = "cd /workspace/proj && python3 -B -m pytest -q"


def test_a_deep_agent_fixes_a_bug_through_its_own_tools() -> None:
    script = [
        tool_call("write_file", 1, file_path="/workspace/proj/calc.py", content=BUGGY),
        tool_call("write_file", 2, file_path="/workspace/proj/test_calc.py", content=TESTS),
        tool_call("execute", 3, command=RUN_TESTS),
        tool_call(
            "edit_file",
            4,
            file_path="/workspace/proj/calc.py",
            old_string="a - b",
            new_string="a + b",
        ),
        tool_call("execute", 5, command=RUN_TESTS),
        AIMessage(content="Fixed: add() adds."),
    ]
    with ToolrtSandbox() as sandbox:
        agent = create_deep_agent(model=ScriptedChatModel(messages=iter(script)), backend=sandbox)
        state = agent.invoke({"messages": [{"role": "user", "content": "fix calc.py"}]})

        results = {
            m.tool_call_id: str(m.content) for m in state["messages"] if isinstance(m, ToolMessage)
        }
        assert "1 failed" in results["call_3"]
        assert "1 passed" in results["call_5"]
        assert state["messages"][-1].content == "Fixed: add() adds."
        [fixed] = sandbox.download_files(["/workspace/proj/calc.py"])
        assert fixed.content == b"def add(a, b):\n    return a + b\n"


def test_a_command_over_its_timeout_is_killed_and_says_so() -> None:
    with ToolrtSandbox() as sandbox:
        result = sandbox.execute("echo started; sleep 30", timeout=1)
        assert result.exit_code == 124
        assert result.output.startswith("started\n")
        assert "timed out after 1 s" in result.output
        assert sandbox.execute("pgrep -c sleep || true").output == "0\n"


def test_failures_are_results_and_missing_files_the_harness_errors() -> None:
    with ToolrtSandbox() as sandbox:
        failed = sandbox.execute("echo out; echo err >&2; exit 3")
        assert (failed.output, failed.exit_code) == ("out\nerr\n", 3)
        refused = sandbox.execute("printf 'a\x00b'")
        assert refused.exit_code is None
        assert "INVALID_ARGUMENTS" in refused.output
        [missing] = sandbox.download_files(["/workspace/nope.txt"])
        assert missing.error == "file_not_found"
        [outside] = sandbox.upload_files([("/etc/motd", b"x")])
        assert outside.error == "permission_denied"
        assert sandbox.read("/workspace/nope.txt").error


def test_a_session_gone_raises_sandbox_gone(client: Client) -> None:
    sandbox = ToolrtSandbox()
    client.close_session(sandbox.id)
    with pytest.raises(SandboxGone):
        sandbox.execute("true")
    with pytest.raises(SandboxGone):
        sandbox.download_files(["/workspace/x"])
    sandbox.close()


async def test_a_cancelled_aexecute_stops_the_command() -> None:
    with ToolrtSandbox() as sandbox:
        running = asyncio.create_task(
            sandbox.aexecute("touch /tmp/started; sleep 60; touch /tmp/done")
        )
        while sandbox.download_files(["/tmp/started"])[0].error:
            await asyncio.sleep(0.05)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        # The next command waits for the cancelled one to have ended.
        after = await sandbox.aexecute("pgrep -c sleep || true; ls /tmp")
        assert after.output.startswith("0\n")
        assert "done" not in after.output.split()


def test_get_or_create_comes_back_to_an_open_session_and_replaces_a_closed_one(
    client: Client,
) -> None:
    first = get_or_create_sandbox()
    first.write("/workspace/kept.txt", "kept")
    again = get_or_create_sandbox(first.id)
    assert again.id == first.id
    assert again.read("/workspace/kept.txt").file_data["content"] == "kept"
    again.close()
    assert first.id not in {s.id for s in client.list_sessions() if s.state == "ready"}
    replaced = get_or_create_sandbox(first.id)
    assert replaced.id != first.id
    replaced.close()


def test_the_sessions_it_opens_carry_the_harness_label(client: Client) -> None:
    with ToolrtSandbox() as sandbox:
        assert sandbox.id in harness_sessions(client, "deepagents")
