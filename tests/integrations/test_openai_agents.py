"""The OpenAI Agents SDK's own `Runner` driving a `SandboxAgent` (model
scripted with the SDK's `ScriptedModel`) in toolrt sessions, and the client's
lifecycle: resume after the harness process restarts, hydrate, delete, and
a cancelled run's command stopped."""

from __future__ import annotations

import asyncio
import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from agents import Runner
from agents.run_config import RunConfig, SandboxRunConfig
from agents.sandbox import SandboxAgent
from agents.sandbox.errors import (
    ExecTransportError,
    ExposedPortUnavailableError,
    PtySessionNotFoundError,
    WorkspaceReadNotFoundError,
)
from agents.sandbox.snapshot import LocalSnapshotSpec
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseCustomToolCall

from runtime.client import Client
from runtime.integrations.connection import harness_sessions
from runtime.integrations.openai_agents import (
    HARNESS,
    ToolrtSandboxClient,
    ToolrtSandboxClientOptions,
)

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = "from calc import add\n\nassert add(2, 3) == 5, add(2, 3)\nprint('all passed')\n"
# -B: no bytecode cache, which could not tell the fix (same size, same second) from the bug.
RUN_TESTS = {"cmd": "python3 -B test_calc.py", "workdir": "repo"}


def fixed(calc: bytes) -> bool:
    # The SDK's apply_patch drops an updated file's last newline.
    return calc.decode().rstrip("\n") == FIXED.rstrip("\n")


def patch(body: str) -> str:
    return f"*** Begin Patch\n{body}*** End Patch\n"


def added(path: str, text: str) -> str:
    return f"*** Add File: {path}\n" + "".join(f"+{line}\n" for line in text.splitlines())


def apply_patch(call_id: str, body: str) -> Any:
    return ResponseCustomToolCall(
        type="custom_tool_call", id=call_id, call_id=call_id, name="apply_patch", input=patch(body)
    )


def fixing_model() -> ScriptedModel:
    """Writes a module and its test, runs it (fails), fixes the module, runs it (passes)."""
    fix = "*** Update File: repo/calc.py\n@@\n-    return a - b\n+    return a + b\n"
    return ScriptedModel(
        [
            [apply_patch("p1", added("repo/calc.py", BUGGY) + added("repo/test_calc.py", TESTS))],
            [function_call("exec_command", RUN_TESTS, call_id="t1")],
            [apply_patch("p2", fix)],
            [function_call("exec_command", RUN_TESTS, call_id="t2")],
            [assistant_message("add() is fixed and the test passes")],
        ]
    )


@pytest.fixture(autouse=True)
def sdk_state_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The SDK's default snapshot store lives under HOME: a temporary one here."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return tmp_path / ".local" / "state" / "openai-agents-python" / "sandbox" / "snapshots"


def tool_outputs(result: Any) -> dict[str, str]:
    return {
        item.raw_item["call_id"]: str(item.output)
        for item in result.new_items
        if item.type == "tool_call_output_item"
    }


async def fix_the_bug(sandbox: SandboxRunConfig) -> Any:
    model = fixing_model()
    agent = SandboxAgent(name="fixer", instructions="Fix the failing test.", model=model)
    result = await Runner.run(
        agent, "Make repo/test_calc.py pass", run_config=RunConfig(sandbox=sandbox)
    )
    model.assert_complete()
    assert result.final_output == "add() is fixed and the test passes"
    outputs = tool_outputs(result)
    assert "AssertionError: -1" in outputs["t1"], outputs
    assert "all passed" in outputs["t2"] and "AssertionError" not in outputs["t2"], outputs
    return result


async def test_runner_in_a_session_passed_in(client: Client) -> None:
    sandbox = ToolrtSandboxClient()
    session = await sandbox.create(options=ToolrtSandboxClientOptions())
    try:
        async with session:
            await fix_the_bug(SandboxRunConfig(session=session))
            # The runner leaves a session passed in as it was: open, files in place.
            assert fixed((await session.read(Path("repo/calc.py"))).read())
            [toolrt_id] = harness_sessions(client, HARNESS)
            assert toolrt_id == session.state.toolrt_session_id
            info = client.get_session(toolrt_id)
            assert info.labels["toolrt.integration"] == "openai-agents"
    finally:
        await sandbox.delete(session)
    assert harness_sessions(client, HARNESS) == []


async def test_runner_creates_its_own_session(client: Client, sdk_state_in: Path) -> None:
    await fix_the_bug(
        SandboxRunConfig(client=ToolrtSandboxClient(), options=ToolrtSandboxClientOptions())
    )
    # The runner deleted its session; it persisted the workspace (a tar stream
    # from toolrt) into the SDK's snapshot store first.
    assert harness_sessions(client, HARNESS) == []
    [snapshot] = sdk_state_in.glob("*.tar")
    with tarfile.open(snapshot) as tar:
        member = tar.extractfile("./repo/calc.py")
        assert member is not None and fixed(member.read())


RESUME = """
import asyncio, json, sys
from pathlib import Path
from runtime.integrations.openai_agents import ToolrtSandboxClient

async def main():
    client = ToolrtSandboxClient()
    session = await client.resume(client.deserialize_session_state(json.loads(sys.argv[1])))
    await session.start()
    print((await session.read(Path("note.txt"))).read().decode())
    await client.delete(session)

asyncio.run(main())
"""


# Through the terminal path (the session supports PTY), waiting far past the cancel.
SLEEPER = {"cmd": "touch /tmp/started; sleep 300", "yield_time_ms": 30_000}


def sleeper_started(client: Client) -> bool:
    sessions = harness_sessions(client, HARNESS)
    return any(client.stat(s, "/tmp/started").exists for s in sessions)


async def cancel_while_sleeping(client: Client, sandbox: SandboxRunConfig) -> None:
    """A run whose model's `exec_command` sleeps, cancelled once the command has started."""
    model = ScriptedModel(
        [[function_call("exec_command", SLEEPER, call_id="s1")], [assistant_message("woke")]]
    )
    agent = SandboxAgent(name="sleeper", instructions="Sleep.", model=model)
    run = asyncio.create_task(
        Runner.run(agent, "Sleep a while", run_config=RunConfig(sandbox=sandbox))
    )
    while not run.done() and not sleeper_started(client):
        await asyncio.sleep(0.05)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run


async def test_a_cancelled_run_closes_the_session_it_created(
    client: Client, sdk_state_in: Path
) -> None:
    options = ToolrtSandboxClientOptions()
    await cancel_while_sleeping(
        client, SandboxRunConfig(client=ToolrtSandboxClient(), options=options)
    )
    assert harness_sessions(client, HARNESS) == []


async def test_a_cancelled_run_stops_its_command_in_a_session_passed_in(client: Client) -> None:
    sandbox = ToolrtSandboxClient()
    session = await sandbox.create(options=ToolrtSandboxClientOptions())
    try:
        await session.start()
        await cancel_while_sleeping(client, SandboxRunConfig(session=session))
        # The session stays open and usable; the command the run started is gone.
        assert harness_sessions(client, HARNESS) == [session.state.toolrt_session_id]
        processes = await session.exec("ps -eo args")
        assert processes.exit_code == 0 and b"sleep 300" not in processes.stdout
    finally:
        await sandbox.delete(session)


async def test_a_new_harness_process_resumes_the_session_by_its_state(client: Client) -> None:
    sandbox = ToolrtSandboxClient()
    session = await sandbox.create(options=ToolrtSandboxClientOptions())
    try:
        await session.start()
        await session.write(Path("note.txt"), io.BytesIO(b"kept across processes"))
        state = json.dumps(sandbox.serialize_session_state(session.state))
    except BaseException:
        await sandbox.delete(session)
        raise
    # Another process, another client: it attaches to the same toolrt session and deletes it.
    out = subprocess.run([sys.executable, "-c", RESUME, state], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "kept across processes\n"
    assert harness_sessions(client, HARNESS) == []


async def test_a_lost_session_is_replaced_and_hydrated_from_the_snapshot(
    client: Client, tmp_path: Path
) -> None:
    sandbox = ToolrtSandboxClient()
    session = await sandbox.create(
        options=ToolrtSandboxClientOptions(),
        snapshot=LocalSnapshotSpec(base_path=tmp_path / "snaps"),
    )
    await session.start()
    await session.write(Path("src/data.bin"), io.BytesIO(bytes(range(256))))
    await session.stop()  # persists the workspace into the snapshot
    old = session.state.toolrt_session_id
    await sandbox.delete(session)

    resumed = await sandbox.resume(session.state)
    try:
        await resumed.start()
        assert resumed.state.toolrt_session_id != old
        assert (await resumed.read(Path("src/data.bin"))).read() == bytes(range(256))
    finally:
        await sandbox.delete(resumed)


async def test_exec_bytes_users_and_ports(client: Client) -> None:
    sandbox = ToolrtSandboxClient()
    session = await sandbox.create(options=ToolrtSandboxClientOptions(exposed_ports=(8080,)))
    try:
        await session.start()
        result = await session.exec("printf", "\\000\\377", shell=False)
        assert (result.exit_code, result.stdout) == (0, b"\x00\xff")
        failed = await session.exec("exit 3")
        assert failed.exit_code == 3
        with pytest.raises(ExecTransportError, match="USER_NOT_ALLOWED"):
            await session.exec("id", user="root")
        with pytest.raises(ExposedPortUnavailableError):
            await session.resolve_exposed_port(8080)
        with pytest.raises(WorkspaceReadNotFoundError):
            await session.read(Path("missing.txt"))
    finally:
        await sandbox.delete(session)


async def test_users_the_options_list_run_commands(client: Client) -> None:
    sandbox = ToolrtSandboxClient()
    session = await sandbox.create(options=ToolrtSandboxClientOptions(users=("root",)))
    try:
        await session.start()
        assert list(client.get_session(session.state.toolrt_session_id).users) == ["root"]
        as_root = await session.exec("id -u", user="root")
        assert (as_root.exit_code, as_root.stdout) == (0, b"0\n")
        await session.write(Path("mine.txt"), io.BytesIO(b"x"), user="root")
        owner = await session.exec("stat -c %u mine.txt")
        assert owner.stdout == b"0\n"
        # The terminal path carries the user too.
        update = await session.pty_exec_start("id -u", user="root", tty=True, yield_time_s=30)
        assert (update.exit_code, update.output.strip()) == (0, b"0")
        with pytest.raises(ExecTransportError, match="USER_NOT_ALLOWED"):
            await session.exec("id", user="nobody")
    finally:
        await sandbox.delete(session)


class TerminalDriver(ScriptedModel):
    """Starts a program in a terminal with `exec_command`, then types each line
    into it with `write_stdin` once the text it waits for has appeared, polling
    (an empty write) meanwhile: the process id is read from the tool's output."""

    def __init__(self, start: dict[str, Any], script: list[tuple[str, str]], done: str) -> None:
        super().__init__([[function_call("exec_command", start, call_id="start")]])
        self._script = list(script)
        self._done = done
        self._turns = 0
        self._seen = ""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> Any:
        outputs = [
            item["output"]
            for item in (input if isinstance(input, list) else [])
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]
        if outputs and not self.remaining_steps:
            self._seen += str(outputs[-1])
            self._turns += 1
            [process_id, *_] = re.findall(r"session ID (\d+)", str(outputs[-1])) or [""]
            if self._script and self._script[0][0] in self._seen and process_id:
                _, line = self._script.pop(0)
                self._seen = ""
                args_ = {"session_id": int(process_id), "chars": line, "yield_time_ms": 1000}
            elif self._script and process_id and self._turns < 40:
                args_ = {"session_id": int(process_id), "chars": ""}
            else:
                self.enqueue([assistant_message(self._done)])
                return await super().get_response(system_instructions, input, *args, **kwargs)
            call_id = f"w{self._turns}"
            self.enqueue([function_call("write_stdin", args_, call_id=call_id)])
        return await super().get_response(system_instructions, input, *args, **kwargs)


async def test_the_model_drives_an_interactive_program_through_the_terminal(
    client: Client,
) -> None:
    model = TerminalDriver(
        {"cmd": "python3 -q -i", "tty": True, "yield_time_ms": 1000},
        [(">>> ", "print(6 * 7)\n"), ("42", "exit()\n")],
        "the answer is 42",
    )
    agent = SandboxAgent(name="repl", instructions="Use the terminal.", model=model)
    sandbox = SandboxRunConfig(client=ToolrtSandboxClient(), options=ToolrtSandboxClientOptions())
    result = await Runner.run(agent, "What is 6 * 7?", run_config=RunConfig(sandbox=sandbox))
    assert result.final_output == "the answer is 42"
    outputs = list(tool_outputs(result).values())
    assert "Process running with session ID" in outputs[0], outputs
    assert any(re.search(r"^42\r?$", text, re.M) for text in outputs), outputs
    assert "Process exited with code 0" in outputs[-1], outputs
    assert harness_sessions(client, HARNESS) == []


async def test_a_command_outliving_its_yield_is_polled_and_stdin_needs_a_terminal(
    client: Client,
) -> None:
    sandbox = ToolrtSandboxClient()
    session = await sandbox.create(options=ToolrtSandboxClientOptions())
    try:
        await session.start()
        assert session.supports_pty()
        update = await session.pty_exec_start("read line; echo done", yield_time_s=0.25)
        # Without a terminal stdin is closed at once: `read` sees its end.
        while update.exit_code is None:
            assert update.process_id is not None
            update = await session.pty_write_stdin(session_id=update.process_id, chars="")
        assert update.exit_code == 0 and b"done" in update.output
        slow = await session.pty_exec_start("sleep 600", yield_time_s=0.25)
        assert slow.process_id is not None and slow.exit_code is None
        with pytest.raises(RuntimeError, match="stdin is not available"):
            await session.pty_write_stdin(session_id=slow.process_id, chars="x")
        await session.pty_terminate_all()
        with pytest.raises(PtySessionNotFoundError):
            await session.pty_write_stdin(session_id=slow.process_id, chars="")
        refused = session.pty_exec_start("id", user="root", tty=True)
        with pytest.raises(ExecTransportError, match="USER_NOT_ALLOWED"):
            await refused
    finally:
        await sandbox.delete(session)
