"""The agent runs with a millisecond of timer slack (Go's scheduler monitor
then wakes about once a millisecond, not every 20 µs: less of the agent's
CPU per call), while every command it starts - a shell call, the spare
shell's next one, a program - keeps the slack a process of the container has
without the agent: a `sleep 0.001` does not oversleep."""

from __future__ import annotations

import os

import pytest

from runtime.sandbox.docker.backend import container_name
from tests.helpers import under_gvisor

pytestmark = pytest.mark.docker

AGENT_SLACK = "1000000"
READ_SLACK = "cat /proc/self/timerslack_ns"


def test_commands_keep_the_containers_timer_slack_while_the_agent_has_its_own(
    session, docker_client
):
    if under_gvisor():
        pytest.skip("gVisor has no timer slack: the agent runs as it started")
    container = docker_client.containers.get(container_name(session.id))
    # A process the engine starts in the container, not the agent's child.
    code, out = container.exec_run(["cat", "/proc/self/timerslack_ns"])
    assert code == 0, out
    natural = out.decode().strip()
    assert natural.isdigit() and natural != AGENT_SLACK

    first = session.shell(READ_SLACK)
    again = session.shell(READ_SLACK)  # the spare shell started after the first
    program = session.exec(["cat", "/proc/self/timerslack_ns"])
    assert first.output["stdout"].strip() == natural, first
    assert again.output["stdout"].strip() == natural, again
    assert program.exit_code == 0 and program.stdout.decode().strip() == natural

    agent = container.attrs["State"]["Pid"]
    with open(f"/proc/{agent}/comm") as comm:
        assert comm.read().strip() == "toolrt-agent"  # executed again by its name
    threads = thread_slack(agent)
    assert threads and all(slack == AGENT_SLACK for slack in threads.values()), threads


def thread_slack(pid: int) -> dict[str, str]:
    """Each thread of `pid` and its timer slack (read as root on the host).
    A thread may end between the listing and the read (the agent retires
    one that could not take its ids back, users.go): it is left out."""
    slack = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{tid}/timerslack_ns") as f:
                slack[tid] = f.read().strip()
        except FileNotFoundError:
            continue
    return slack
