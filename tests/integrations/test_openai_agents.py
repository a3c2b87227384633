"""The OpenAI Agents SDK's own `Runner` driving a `SandboxAgent` (model
scripted with the SDK's `ScriptedModel`) in toolrt sessions, and the client's
lifecycle: resume after the harness process restarts, hydrate, delete."""

from __future__ import annotations

import io
import json
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
        assert not session.supports_pty()
    finally:
        await sandbox.delete(session)
