"""`toolrt mcp` driven by the official MCP client over stdio, on a real sandbox."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.helpers import containers_of

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]


async def mcp_conversation(args: list[str], errlog: Any, during: Any) -> dict[str, Any]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "runtime", "mcp", *args], cwd=str(ROOT)
    )
    seen: dict[str, Any] = {}
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write) as client:
            await client.initialize()
            seen["tools"] = (await client.list_tools()).tools
            seen["ok"] = await client.call_tool("shell", {"command": "echo hi > f; cat f"})
            seen["again"] = await client.call_tool("shell", {"command": "cat f"})
            seen["bad"] = await client.call_tool("shell", {"command": 5})
            seen["unknown"] = await client.call_tool("browser", {})
            seen["containers"] = during()
    return seen


def test_mcp_front_serves_the_tools_in_one_session_per_connection(docker_client, tmp_path):
    instance = f"test-mcp-{uuid.uuid4().hex[:10]}"
    try:
        with open(tmp_path / "stderr", "w") as errlog:
            seen = asyncio.run(
                mcp_conversation(
                    ["--instance", instance],
                    errlog,
                    lambda: containers_of(docker_client, instance),
                )
            )
        (shell,) = [tool for tool in seen["tools"] if tool.name == "shell"]
        assert shell.name == "shell" and shell.input_schema["required"] == ["command"]
        assert "NO network" in shell.description
        assert not seen["ok"].is_error
        assert seen["ok"].structured_content["stdout"] == "hi\n"
        assert json.loads(seen["ok"].content[0].text)["exit_code"] == 0
        assert seen["again"].structured_content["stdout"] == "hi\n"  # the same sandbox
        assert seen["bad"].is_error
        assert seen["bad"].structured_content["error"]["code"] == "INVALID_ARGUMENTS"
        assert "/command" in seen["bad"].content[0].text
        assert seen["unknown"].structured_content["error"]["code"] == "UNKNOWN_TOOL"
        (container,) = seen["containers"]
        assert container.labels["toolrt.session"]
        assert container.labels["toolrt.mcp.pid"] and container.labels["toolrt.mcp.started"]
        # The client has disconnected: the session's sandbox is gone.
        assert containers_of(docker_client, instance) == []
    finally:
        for container in containers_of(docker_client, instance):
            container.remove(force=True)


def test_containers_of_fronts_that_are_gone_are_removed_at_start(docker_client, tmp_path):
    finished = subprocess.Popen(["true"])
    finished.wait()  # its pid (and start time) name no running front
    dead_pid = str(finished.pid)
    labels = {"toolrt.test": "1", "toolrt.mcp.pid": dead_pid, "toolrt.mcp.started": "1.00"}
    orphan = docker_client.containers.create(
        "toolrt-sandbox:default", ["sleep", "60"], labels=labels, network_mode="none"
    )
    instance = f"test-mcp-{uuid.uuid4().hex[:10]}"
    try:
        with open(tmp_path / "stderr", "w") as errlog:
            asyncio.run(mcp_conversation(["--instance", instance], errlog, lambda: None))
        with pytest.raises(docker.errors.NotFound):
            orphan.reload()
        assert "MCP fronts that are gone" in (tmp_path / "stderr").read_text()
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            orphan.remove(force=True)


def test_mcp_front_on_a_running_daemon(daemon, tmp_path, docker_client):
    with open(tmp_path / "stderr", "w") as errlog:
        seen = asyncio.run(
            mcp_conversation(
                ["--target", daemon.target],
                errlog,
                lambda: containers_of(docker_client, daemon.instance),
            )
        )
    assert seen["ok"].structured_content["stdout"] == "hi\n"
    assert seen["bad"].is_error
    assert len(seen["containers"]) == 1
    assert containers_of(docker_client, daemon.instance) == []
    assert daemon.daemon.core.manager.sessions_of("default") == []
