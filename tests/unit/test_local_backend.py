"""The local backend: the real agent as a child process in private namespaces."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from runtime.agent import protocol
from runtime.config import Config
from runtime.errors import EngineUnavailable, LimitExceeded, SandboxLost
from runtime.sandbox import local
from runtime.sandbox.backend import ConnectedSandbox
from runtime.sandbox.local import LocalBackend
from tests.helpers import BASE_ENV, agent_processes, spec, with_sandbox


async def shell(sandbox: ConnectedSandbox, command: str) -> tuple[int | None, str]:
    result, body = await sandbox.agent.exec(protocol.Exec(command=command, env=BASE_ENV))
    return result.exit_code, body[: result.stdout.head + result.stdout.tail].decode()


def test_the_agent_runs_as_in_a_container_and_never_touches_the_host(tmp_path):
    marker = f"toolrt-local-{uuid.uuid4().hex}"

    async def check(backend: LocalBackend, sandbox: ConnectedSandbox) -> None:
        code, out = await shell(
            sandbox,
            f"id -u; hostname; pwd; touch /workspace/{marker} /tmp/{marker}; "
            "grep CapEff /proc/self/status; ls /proc | grep -c '^[0-9]'",
        )
        assert code == 0
        uid, host, cwd, caps, pids = out.split("\n")[:5]
        assert (uid, host, cwd) == ("1000", "sandbox", "/workspace")
        assert caps.split()[1] == "0000000000000000"
        assert int(pids) < 10  # its own pid namespace, not the host's processes
        code, out = await shell(sandbox, f"touch /etc/{marker} /{marker} 2>&1; echo $?")
        assert out.count("Read-only file system") == 2
        written = await sandbox.agent.write(f"/workspace/sub/{marker}", b"data")
        assert written.bytes_written == 4

    with_sandbox(check)
    for path in (f"/workspace/{marker}", f"/tmp/{marker}", f"/etc/{marker}", f"/{marker}"):
        assert not os.path.exists(path)


def test_workspace_size_is_enforced():
    async def check(backend: LocalBackend, sandbox: ConnectedSandbox) -> None:
        code, _ = await shell(sandbox, "head -c 3000000 /dev/zero > /workspace/big")
        assert code != 0
        with pytest.raises(LimitExceeded, match="no space left"):
            await sandbox.agent.write("/workspace/big2", b"x" * 3_000_000)

    with_sandbox(check, workspace_bytes=2 << 20)


def test_destroy_kills_the_agent_and_everything_it_started():
    async def check(backend: LocalBackend, sandbox: ConnectedSandbox) -> None:
        await sandbox.agent.exec(
            protocol.Exec(command="sleep 300 &", env=BASE_ENV, background=True, settle_s=0.1)
        )
        assert await backend.list_owned() == [sandbox.id]
        sleepers = [p for p in agent_processes()[0].children(recursive=True) if "sleep" in p.name()]
        assert sleepers
        await backend.destroy(sandbox.id)
        assert await backend.list_owned() == []
        assert agent_processes() == []
        assert not any(p.is_running() for p in sleepers)
        assert sandbox.lost
        with pytest.raises(SandboxLost):
            await sandbox.agent.ping()

    with_sandbox(check)


def test_an_agent_killed_from_outside_is_sandbox_lost():
    async def check(backend: LocalBackend, sandbox: ConnectedSandbox) -> None:
        call = asyncio.ensure_future(shell(sandbox, "sleep 60"))
        await asyncio.sleep(0.3)
        [agent] = agent_processes()[0].children()
        agent.kill()
        with pytest.raises(SandboxLost, match="stopped answering"):
            await call
        assert sandbox.lost

    with_sandbox(check)


def test_an_agent_that_cannot_start_is_unavailable_and_says_why(monkeypatch):
    monkeypatch.setattr(local, "agent_command", lambda *_: ["/opt/toolrt/agent/no-such-agent"])

    async def run() -> None:
        backend = LocalBackend(Config())
        with pytest.raises(EngineUnavailable) as caught:
            await backend.create(spec())
        assert "no-such-agent" in str(caught.value)
        assert await backend.list_owned() == []

    asyncio.run(run())
    assert agent_processes() == []


def test_without_root_create_is_unavailable(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(EngineUnavailable, match="needs root"):
        asyncio.run(LocalBackend(Config()).create(spec()))


def test_close_kills_every_sandbox_of_the_backend():
    async def run() -> None:
        backend = LocalBackend(Config())
        created = await asyncio.gather(*(backend.create(spec()) for _ in range(3)))
        assert sorted(await backend.list_owned()) == sorted(s.id for s in created)
        assert len(agent_processes()) == 3
        assert await backend.reap_owned() == 3
        assert agent_processes() == []

    asyncio.run(run())


def test_commands_run_and_are_killed_at_their_deadline():
    async def check(backend: LocalBackend, sandbox: ConnectedSandbox) -> None:
        request = protocol.Exec(
            command="echo started; (setsid sleep 30 &); sleep 30",
            env=BASE_ENV,
            timeout_s=0.5,
            grace_s=0.2,
        )
        result, body = await sandbox.agent.exec(request)
        # TERM first, KILL after the grace: bash ends by whichever reached it.
        assert result.killed == "deadline" and result.exit_code in (128 + 15, 128 + 9)
        assert body.startswith(b"started\n")
        assert await shell(sandbox, "pgrep -c sleep || true") == (0, "0\n")
        # No launcher stays: the agent is the command's parent.
        assert await shell(sandbox, "cat /proc/$PPID/comm") == (0, "toolrt-agent\n")

    with_sandbox(check)
