"""Holes an adversarial review found in the exec path, each reproduced
against a real sandbox: a spawn report a `cwd` could forge, a shell-state
channel any process could write, survivors of a timeout under CPU pressure,
and an idle move to the background that escaped `timeout_s`."""

from __future__ import annotations

import time

import pytest

from runtime.client import Client
from tests.helpers import under_gvisor, user_processes

pytestmark = pytest.mark.docker

# Generous: the machine is shared; a call that never answers is what counts.
RPC_DEADLINE_S = 60


def shell(client: Client, session, command: str, **arguments):
    """A shell call with an RPC deadline, so a call that never answers fails the test."""
    return client.call(
        session.id, "shell", {"command": command, **arguments}, timeout=RPC_DEADLINE_S
    )


# -- 1. the spawn helper's report ------------------------------------------
FORGING_CWDS = [
    '/workspace/x", "status": 0, "y": "',
    '/workspace/x", "status": "boom", "y": "',
    '/workspace/x"}\n{"status": 0}\n{"y": "',
    "/workspace/back\\slash %s%n%d",
]


def test_a_cwd_cannot_forge_the_outcome_of_its_call(client, session):
    for cwd in FORGING_CWDS:
        for _ in range(3):
            result = shell(client, session, "touch /workspace/ran; echo never", cwd=cwd)
            assert not result.ok, result
            assert result.error_code == "NOT_FOUND", result
            assert "No such file or directory" in result.error_message
    assert shell(client, session, "cd /workspace && ls").output["stdout"] == ""
    assert shell(client, session, "echo alive").output["stdout"] == "alive\n"


# -- 2. the shell-state channel ---------------------------------------------
# A hostile leftover: it looks for the state channel of later calls wherever
# it could be (a path in a command line, a descriptor of another process) and
# writes a record that would move the session to /workspace/trap and make
# every later command source /workspace/evil.sh.
HUNTER = r"""
import os, re, time
forged = b"/workspace/trap\n\0BASH_ENV=/workspace/evil.sh\0"
done = set()
me = str(os.getpid())
end = time.monotonic() + 20
while time.monotonic() < end:
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == me:
            continue
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
            fds = [f"/proc/{pid}/fd/{fd}" for fd in os.listdir(f"/proc/{pid}/fd") if int(fd) > 2]
        except OSError:
            continue
        paths = [p.decode() for p in re.findall(rb"/tmp/\.toolrt-[^\s'\x00]+", cmdline)]
        for target in paths + fds:
            if target in done:
                continue
            done.add(target)
            try:
                fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
                os.write(fd, forged)
                os.close(fd)
                print("wrote", target, flush=True)
            except OSError:
                pass
    time.sleep(0.02)
"""


def prepare_traps(session) -> None:
    evil = "touch /workspace/pwned\n"
    session.call("write_file", {"path": "/workspace/evil.sh", "content": evil})
    session.call("write_file", {"path": "/workspace/hunter.py", "content": HUNTER})
    assert session.shell("mkdir -p /workspace/trap /workspace/real").ok


def assert_state_untouched(session, cwd: str = "/workspace") -> None:
    after = session.shell("pwd; echo BASH_ENV=${BASH_ENV-unset}; cat /workspace/pwned 2>&1")
    assert after.output["stdout"].splitlines()[:2] == [cwd, "BASH_ENV=unset"], after
    assert "No such file" in after.output["stdout"], after


def test_a_leftover_process_cannot_forge_the_state_of_later_calls(session):
    prepare_traps(session)
    hunter = session.shell("python3 -u /workspace/hunter.py", background=True)
    assert hunter.ok, hunter
    for _ in range(4):
        victim = session.shell("sleep 1", persist_env=True)
        assert victim.ok and victim.output["exit_code"] == 0, victim
    assert_state_untouched(session)
    session.call("process_kill", {"process_id": hunter.output["process_id"]})


def test_a_child_process_cannot_forge_the_state_and_junk_is_ignored_with_a_note(session):
    prepare_traps(session)
    attempts = {
        # A child of the command replays the shell's own EXIT trap (same
        # code, same channel) after moving elsewhere and exporting BASH_ENV.
        "ignored": 'bash -c "cd /workspace/trap; export BASH_ENV=/workspace/evil.sh; '
        '$(trap -p EXIT)"',
        # The shell itself writes junk into its channel: the report is
        # refused whole, and the result says so.
        "malformed": "t=$(trap -p EXIT); [[ $t =~ \\>\\&([0-9]+) ]] && "
        "printf junk >&${BASH_REMATCH[1]}; cd /workspace/trap",
    }
    for said, attempt in attempts.items():
        result = session.shell(f"cd /workspace/real; {attempt}", persist_env=True)
        assert result.ok, result
        assert said in result.output.get("note", ""), result.output
        assert_state_untouched(session, "/workspace/real")


def test_a_directory_the_shell_cannot_enter_sends_it_home_with_a_note(session):
    locked = session.shell("mkdir -p /workspace/locked && cd /workspace/locked && chmod 000 .")
    assert locked.ok, locked
    result = session.shell("pwd")
    assert result.ok, result
    assert result.output["stdout"] == "/workspace\n"
    assert "/workspace/locked" in result.output["note"]
    # An explicit cwd the shell cannot enter is the caller's mistake, said so.
    denied = session.shell("pwd", cwd="/workspace/locked")
    assert denied.error_code == "PATH_DENIED", denied
    assert "Permission denied" in denied.error_message


def test_variables_that_run_code_at_shell_start_are_not_kept(session):
    prepare_traps(session)
    result = session.shell(
        "export BASH_ENV=/workspace/evil.sh SHELLOPTS KEPT=1; f() { :; }; export -f f",
        persist_env=True,
    )
    assert result.ok, result
    assert "BASH_ENV" in result.output["note"], result.output
    assert_state_untouched(session)
    assert session.shell("echo $KEPT; type -t f || echo no-f").output["stdout"] == "1\nno-f\n"


def test_tmp_downloads_after_shell_calls(client):
    roots = ["/workspace", "/tmp"]
    with client.session(allowlist={"read_roots": roots, "write_roots": roots}) as session:
        assert session.shell("cd /tmp && echo hi > /tmp/note.txt").ok
        assert b"note.txt" in session.download(["/tmp"])


# -- 5. survivors of a timeout -----------------------------------------------
# Under gVisor every task is also a host thread of the sentry's, counted
# with the sentry's own (about 140 at rest) against the same pids limit
# (DESIGN, platform notes): a few dozen spinners end the sandbox there,
# which is not what this is about, so fewer.
SPINNERS = (
    f"for i in $(seq 1 {8 if under_gvisor() else 200}); do "
    "sh -c 'trap \"\" TERM; while :; do :; done' & done; sleep 1000"
)


def test_a_timeout_under_cpu_pressure_leaves_no_survivor(client, session, docker_client):
    started = time.monotonic()
    result = shell(client, session, SPINNERS, timeout_s=3)
    assert result.error_code == "TIMEOUT", result
    assert time.monotonic() - started < 3 + 20
    # Every spinner was killed; on a loaded host the last may still be leaving
    # the kernel when the agent stops waiting for them (deadlines.GIVE_UP_S)
    # and answers. Killed ones go within seconds; a survivor never would.
    deadline = time.monotonic() + 20
    while (left := user_processes(docker_client, session.id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], f"{len(left)} processes survived: {left[:5]}"
    assert session.shell("echo alive").output["stdout"] == "alive\n"


def test_process_kill_stops_a_busy_tree_that_escaped_its_parent(session, docker_client):
    started = session.shell(
        'for i in 1 2 3; do setsid sh -c \'trap "" TERM; '
        '(env -i sh -c "while :; do :; done" &); while :; do :; done\' & done; '
        "echo up; sleep 1000",
        background=True,
    )
    assert started.ok, started
    time.sleep(1)
    assert len(user_processes(docker_client, session.id)) >= 7
    killed = session.call("process_kill", {"process_id": started.output["process_id"]})
    assert killed.ok and killed.output["state"] == "killed", killed
    assert user_processes(docker_client, session.id) == []


def test_each_call_is_marked_by_a_group_it_cannot_shed(session):
    shed = (
        "id -G; python3 -c 'import os; os.setgroups([])' 2>&1 | tail -1; "
        "setsid env -i /usr/bin/id -G"
    )
    first = session.shell(shed).output["stdout"].splitlines()
    second = session.shell(shed).output["stdout"].splitlines()
    mine, other = first[0].split(), second[0].split()
    assert mine[0] == "1000" and len(mine) == 2 and int(mine[1]) >= 200000, first
    assert other[1] != mine[1]
    assert "PermissionError" in first[1]
    assert first[2] == first[0]


# -- 6. an idle move to the background ---------------------------------------
def test_an_explicit_timeout_still_bounds_a_command_moved_to_the_background(session):
    started = time.monotonic()
    moved = session.shell("sleep 6; echo late > /workspace/late", timeout_s=3, idle_timeout_s=1)
    assert moved.error_code == "TIMEOUT" and moved.output["reason"] == "idle", moved
    handle = moved.output["process_id"]
    time.sleep(max(0.0, started + 8 - time.monotonic()))
    assert session.shell("cd /workspace && ls").output["stdout"] == "", "the deadline did not hold"
    listed = session.call("process_list", {}).output["processes"]
    assert [(p["process_id"], p["state"]) for p in listed] == [(handle, "killed")]


def test_without_timeout_s_an_idle_move_outlives_the_default_deadline(client):
    with client.session(limits={"call_timeout_s": 2}) as session:
        moved = session.shell("sleep 4; echo late > /workspace/late", idle_timeout_s=1)
        assert moved.output["reason"] == "idle", moved
        handle = moved.output["process_id"]
        deadline = time.monotonic() + 20
        while (done := session.call("process_output", {"process_id": handle})).output[
            "state"
        ] == "running" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert done.output["state"] == "exited" and done.output["exit_code"] == 0, done
        assert session.shell("cat /workspace/late").output["stdout"] == "late\n"


def test_the_shell_description_says_what_bounds_a_backgrounded_command(client):
    [tool] = [t for t in client.list_tools() if t["name"] == "shell"]
    assert "A timeout_s you pass still holds after a move to the" in tool["description"]
    assert "still applies" in tool["parameters"]["properties"]["timeout_s"]["description"]
