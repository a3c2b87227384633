"""How a call's command starts: through the C launcher, which leaves the
command the agent's own child."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from runtime.sandbox.agent_dir import HELPER
from tests.helpers import sandbox_processes, user_processes

pytestmark = pytest.mark.docker


def processes_during(client, session, docker_client, command: str) -> list[list[str]]:
    """The sandbox's processes (pid, ppid, user, args) while `command`
    (which runs `sleep 41`) runs."""
    seen: list[list[str]] = []
    call = threading.Thread(target=session.shell, args=(command,), kwargs={"timeout_s": 3})
    call.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any("sleep 41" in p[3] for p in seen):
        time.sleep(0.1)
        seen = sandbox_processes(docker_client, session.id)
    call.join(10)
    return seen


def assert_the_agent_is_the_commands_parent(seen: list[list[str]]) -> None:
    """agent → bash (not root) → sleep: no launcher stays."""
    by_pid = {p[0]: p for p in seen}
    [agent] = [p for p in seen if "/opt/toolrt/agent/toolrt-agent" in p[3]]
    [sleep] = [p for p in seen if p[3] == "sleep 41"]
    shell = by_pid[sleep[1]]
    assert shell[3].startswith("/bin/bash -c ") and shell[2] != "root", seen
    assert shell[1] == agent[0] and not any("toolrt-spawn" in p[3] for p in seen), seen


def test_the_c_helper_is_built_and_the_command_is_the_agents_child(client, session, docker_client):
    built = Path(__file__).resolve().parents[2] / "runtime" / "agent" / HELPER
    assert built.exists(), "run `make helper` (make test builds it)"
    assert session.shell("test -x /opt/toolrt/agent/toolrt-spawn").output["exit_code"] == 0
    assert_the_agent_is_the_commands_parent(
        processes_during(client, session, docker_client, "sleep 41")
    )


def test_a_timeout_kills_the_whole_tree(client, docker_client):
    with client.session() as session:
        started = time.monotonic()
        result = session.shell(
            "setsid sleep 301 & (setsid bash -c 'sleep 302 &' &); echo up; sleep 303",
            timeout_s=1.5,
        )
        assert result.error_code == "TIMEOUT"
        assert result.output["stdout"] == "up\n"
        assert time.monotonic() - started < 1.5 + 10  # not sleep 303
        assert [p for p in user_processes(docker_client, session.id) if "sleep" in p] == []
        ok = session.shell("id -u; grep CapEff /proc/self/status; exit 7", cwd="/workspace")
        assert ok.output["exit_code"] == 7
        assert ok.output["stdout"] == "1000\nCapEff:\t0000000000000000\n"
        missing = session.shell("true", cwd="/workspace/nope")
        assert missing.error_code == "NOT_FOUND"
        assert_the_agent_is_the_commands_parent(
            processes_during(client, session, docker_client, "sleep 41")
        )
