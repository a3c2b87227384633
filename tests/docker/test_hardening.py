"""A session's container is hardened: read back from the engine and from inside."""

from __future__ import annotations

import pytest

from tests.helpers import under_gvisor

pytestmark = pytest.mark.docker
# The descriptor the shell-state channel reaches a command on (static-agent, stateFd).
STATE_FD = 63


def test_container_is_labelled_and_hardened(daemon, client, docker_client):
    with client.session() as session:
        container = docker_client.containers.get(f"toolrt-{session.id}")
        labels = container.labels
        assert labels["toolrt.session"] == session.id
        assert labels["toolrt.daemon"] == daemon.instance
        assert labels["toolrt.tenant"] == "default"

        host = container.attrs["HostConfig"]
        assert host["NetworkMode"] == "none"
        assert host["CapDrop"] == ["ALL"]
        assert sorted(host["CapAdd"]) == ["KILL", "SETGID", "SETUID"]
        assert "no-new-privileges" in host["SecurityOpt"]
        assert host["ReadonlyRootfs"] is True
        assert host["Memory"] > 0 and host["MemorySwap"] == host["Memory"]
        assert host["NanoCpus"] > 0
        assert host["PidsLimit"] > 0
        assert host["LogConfig"]["Type"] == "none"
        assert "exec" in host["Tmpfs"]["/workspace"].split(",")
        assert "size=" in host["Tmpfs"]["/workspace"] and "size=" in host["Tmpfs"]["/tmp"]
        mounts = container.attrs["Mounts"]
        assert all("docker.sock" not in m["Source"] for m in mounts)
        assert all(m["RW"] is False for m in mounts if m["Type"] == "bind")


def test_commands_run_unprivileged_without_network(session):
    result = session.shell(
        "id -u; id -G; grep -E '^(CapEff|CapPrm)' /proc/self/status; "
        # prctl, not /proc/self/status: gVisor's has no NoNewPrivs line.
        'python3 -c \'import ctypes; print("NoNewPrivs:", '
        "ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))'; "
        "(cd /sys/class/net && ls); touch /var/tmp/x 2>&1; "
        "touch /workspace/ok /tmp/ok && echo writable; "
        "find /workspace /tmp -maxdepth 0 -printf 'owner %U %p\\n'; "
        "cat /var/run/docker.sock 2>&1"
    )
    assert result.ok, result
    out = result.output["stdout"]
    lines = out.splitlines()
    assert lines[0] == "1000"
    # The call's own group (the agent finds the call's processes by it), no other.
    groups = lines[1].split()
    assert groups[0] == "1000" and len(groups) == 2 and int(groups[1]) >= 200_000, groups
    assert "CapEff:\t0000000000000000" in out
    assert "CapPrm:\t0000000000000000" in out
    assert "NoNewPrivs: 1" in out
    assert "eth0" not in out  # only loopback
    assert "Read-only file system" in out  # /var/tmp is world-writable: only the mount refuses
    assert "writable" in out
    assert "owner 1000 /workspace" in out and "owner 1000 /tmp" in out
    assert "No such file" in out  # no Docker socket


def test_workspace_size_is_capped(client):
    with client.session(limits={"workspace_bytes": 8 << 20}) as session:
        result = session.shell("head -c 20000000 /dev/zero > /workspace/big; echo rc=$?")
        assert "rc=1" in result.output["stdout"]
        assert "No space left" in result.output["stderr"]


def test_user_code_cannot_kill_or_write_into_the_agent(session):
    result = session.shell(
        "kill -9 1; echo kill=$?; "
        "echo x > /proc/1/fd/0 2>/dev/null; echo write0=$?; "
        "echo x > /proc/1/fd/10 2>/dev/null; echo write10=$?; "
        "echo x > /proc/1/fd/11 2>/dev/null; echo write11=$?; "
        "(cd /proc/1/fd 2>/dev/null && ls) | wc -l; "
        "echo x > /opt/toolrt/agent.py 2>/dev/null; echo agentfile=$?"
    )
    out = result.output["stdout"]
    assert "kill=1" in out
    # The protocol's descriptors (10, 11). Under gVisor /proc/1/fd/0 opens
    # as its path, /dev/null (where the agent put fd 0), which anyone may open.
    assert "write10=1" in out and "write11=1" in out
    assert "write0=1" in out or under_gvisor()
    assert "agentfile=1" in out
    # The agent is still there and still answering.
    again = session.shell("echo alive")
    assert again.ok and again.output["stdout"] == "alive\n"


def test_protocol_descriptors_are_not_inherited(session):
    result = session.shell(
        f'fds=(/proc/self/fd/*); echo "${{fds[@]##*/}}"; readlink /proc/self/fd/{STATE_FD}'
    )
    *listed, state = result.output["stdout"].split()
    fds = sorted(int(x) for x in listed)
    # bash's own 0,1,2 and the glob's directory handle; of the agent only the
    # call's shell-state socket, which takes reports from bash alone.
    assert fds == [0, 1, 2, 3, STATE_FD], fds
    assert state.startswith("socket:"), state


def test_session_env_reaches_commands_only(client, docker_client):
    with client.session(env={"SECRET_TOKEN": "s3cr3t"}) as session:
        result = session.shell("echo $SECRET_TOKEN; cat /proc/1/environ 2>&1 | tr '\\0' ' '")
        assert result.output["stdout"].startswith("s3cr3t\n")
        container = docker_client.containers.get(f"toolrt-{session.id}")
        assert not any("SECRET_TOKEN" in e for e in container.attrs["Config"]["Env"])


@pytest.mark.runc_only("gVisor's /proc/PID/status does not count a process's filters")
def test_the_agent_runs_under_its_own_syscall_filter(session):
    # The engine's filter, then the agent's own (installed on itself at
    # start); a command adds the one its launcher installs.
    counts = (
        session.shell("grep Seccomp_filters /proc/1/status /proc/self/status | awk '{print $2}'")
        .output["stdout"]
        .split()
    )
    assert counts == ["2", "3"], counts
