"""The shell started ahead of a session's next call (static-agent/spare.go),
against a real sandbox: calls use it, none starts while the sandbox is short
of pids, a restore does not count it as a leftover, and nothing another
process of the sandbox user does to a waiting spare reaches a call's answer."""

from __future__ import annotations

import time

import pytest

from runtime.client import Client
from tests.helpers import shell_after_a_pause

pytestmark = pytest.mark.docker

RPC_DEADLINE_S = 60
# How long the shell running this command had been alive, in seconds.
SHELL_AGE = (
    "python3 -c 'import os, sys; "
    'stat = open(f"/proc/{sys.argv[1]}/stat").read().rsplit(")", 1)[1].split(); '
    'up = float(open("/proc/uptime").read().split()[0]); '
    'print(up - int(stat[19]) / os.sysconf("SC_CLK_TCK"))\' $$'
)


def shell(client: Client, session, command: str, **arguments):
    return client.call(
        session.id, "shell", {"command": command, **arguments}, timeout=RPC_DEADLINE_S
    )


def shell_age_after_a_pause(client: Client, session) -> float:
    assert shell(client, session, "true").ok
    time.sleep(1.5)  # the session is idle: its next shell may start now
    result = shell(client, session, SHELL_AGE)
    assert result.ok and result.output["exit_code"] == 0, result
    return float(result.output["stdout"])


@pytest.mark.parametrize("spare", [True, False], ids=["spare", "no-spare"])
def test_a_call_after_an_idle_spell_runs_in_a_shell_started_before_it(make_daemon, spare):
    daemon = make_daemon(spare_shell=spare)
    with Client(daemon.target) as client, client.session() as session:
        age = shell_age_after_a_pause(client, session)
    if spare:
        assert age >= 0.75, age  # started during the pause, not by the call
    else:
        assert age < 0.75, age


def test_the_spare_keeps_what_the_session_carries(client, session):
    assert shell(client, session, "mkdir -p /workspace/d && cd /workspace/d").ok
    assert shell(client, session, "export GREETING=$'two\\nlines'", persist_env=True).ok
    time.sleep(0.5)
    seen = shell(client, session, 'pwd; printf "%s|" "$GREETING"; echo; echo err >&2; exit 3')
    assert seen.output["stdout"] == "/workspace/d\ntwo\nlines|\n", seen
    assert seen.output["stderr"] == "err\n" and seen.output["exit_code"] == 3, seen
    time.sleep(0.5)
    merged = shell(client, session, "echo out; echo err >&2", merge_output=True)
    assert merged.output["stdout"] == "out\nerr\n", merged
    time.sleep(0.5)
    fed = shell(client, session, "tr a-z A-Z", stdin="quiet\n")
    assert fed.output["stdout"] == "QUIET\n", fed
    time.sleep(0.5)
    slept = shell(client, session, "sleep 30", timeout_s=1)
    assert slept.error_code == "TIMEOUT", slept


def test_a_call_in_a_spare_holds_no_descriptor_of_the_spares_own(client, session):
    # A background call reports no shell state: its shell must not keep the
    # state channel, nor the spare's go socket and script.
    assert shell(client, session, "true").ok
    time.sleep(1.0)  # the spare starts
    # Listed by bash's own glob: gVisor's statx refuses a flag `ls` passes.
    listing = "sleep 0.2; for f in /proc/$$/fd/*; do echo ${f##*/}; done > /workspace/fds"
    assert shell(client, session, listing, background=True).ok
    time.sleep(1.5)
    fds = shell(client, session, "cat /workspace/fds").output["stdout"].split()
    assert fds and not {"60", "61", "63"} & set(fds), fds


# A leftover of the sandbox user that goes after every waiting spare through
# /proc/<pid>/fd: output for the next call into its stdout and stderr, a go
# byte into its go channel, and a script of its own into its script memfd,
# written over and over until the write is refused, so that it lands between
# the agent's write and bash's read if anything can.
HUNTER = r"""
import os, time
FORGED = b"echo FORGED-SCRIPT; " * 16
end = time.monotonic() + 12
attacked = set()
while time.monotonic() < end:
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid in attacked:
            continue
        try:
            if b"__toolrt_g" not in open(f"/proc/{pid}/cmdline", "rb").read():
                continue
        except OSError:
            continue
        attacked.add(pid)
        for fd, data in (("1", b"FORGED-OUT\n"), ("2", b"FORGED-ERR\n"), ("60", b"g")):
            try:
                f = os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
                os.write(f, data)
                os.close(f)
                print(pid, fd, flush=True)
            except OSError:
                pass
        try:
            f = os.open(f"/proc/{pid}/fd/61", os.O_WRONLY)
        except OSError:
            continue
        print(pid, "61", flush=True)
        until = time.monotonic() + 1.0
        try:
            while time.monotonic() < until:
                os.pwrite(f, FORGED, 0)
        except OSError:
            pass  # sealed
        os.close(f)
    time.sleep(0.01)
"""


def test_a_leftover_cannot_put_words_in_a_waiting_spares_mouth(client, session):
    written = client.call(
        session.id, "write_file", {"path": "/workspace/hunter.py", "content": HUNTER}
    )
    assert written.ok, written
    hunter = shell(
        client, session, "python3 -u /workspace/hunter.py > /workspace/hits", background=True
    )
    assert hunter.ok, hunter
    for n in range(5):
        time.sleep(0.4)  # a spare starts, the hunter finds it
        answer = shell(client, session, f"echo honest-{n}")
        assert answer.ok and answer.output["exit_code"] == 0, answer
        assert answer.output["stdout"] == f"honest-{n}\n", answer
        assert answer.output["stderr"] == "", answer
    hits = shell(client, session, "cat /workspace/hits").output["stdout"].split()
    # It did get at the spares' script memfd; not at their go sockets, which
    # cannot be reopened, nor at the root-owned pipes.
    assert "61" in hits[1::2], "the hunter never reached a spare"
    assert "60" not in hits[1::2], hits


def test_a_spare_killed_while_it_waits_costs_the_next_call_nothing(client, session):
    assert shell(client, session, "true").ok
    killer = shell(client, session, "sleep 1; kill -9 -1", background=True)
    assert killer.ok, killer
    time.sleep(2.5)
    answer = shell(client, session, "echo still")
    assert answer.ok and answer.output["stdout"] == "still\n", answer
    time.sleep(0.5)
    again = shell(client, session, "echo again")
    assert again.ok and again.output["stdout"] == "again\n", again


def test_a_one_call_environment_never_reaches_another_call_through_a_spare(client, session):
    # A plain variable stays in a spare's /proc/<pid>/environ (and any
    # library named by LD_PRELOAD in its memory); BASH_ENV runs at its start.
    rc = "echo ran >> /workspace/rc.log"
    assert client.call(session.id, "write_file", {"path": "/workspace/rc.sh", "content": rc}).ok
    environ = "tr '\\0' '\\n' < /proc/$$/environ | grep -c ONE_CALL_ONLY"
    for once, seen in (
        ({"ONE_CALL_ONLY": "leaked"}, environ),
        ({"BASH_ENV": "/workspace/rc.sh"}, "cat /workspace/rc.log"),
    ):
        first = shell(client, session, "echo main", env=once)
        assert first.ok and first.output["stdout"] == "main\n", first
        time.sleep(1.5)  # the session is idle: the next call's shell may start
        second = shell(client, session, seen)
        assert second.output["stdout"] in ("0\n", "ran\n"), second


# Leftover sleeps, in groups of at most 12 (none a runaway the agent would
# stop: a quarter of the limit is 16), until six pids are left once the
# call's own shell, subshell and cat are gone (the agent wants eight free
# before it starts a spare).
FILL_PIDS = (
    "c=/sys/fs/cgroup/pids; [ -d $c ] || c=/sys/fs/cgroup; "
    "n=$(( $(cat $c/pids.max) - $(cat $c/pids.current) - 3 )); "
    "for ((i = 0; i < n && i < 12; i++)); do sleep 600 & done; echo $n"
)


@pytest.mark.runc_only("gVisor shows the sandbox no cgroup files: room is assumed there")
def test_no_spare_starts_while_the_pids_limit_is_nearly_full(client):
    with client.session(limits={"pids": 64}) as session:
        assert shell_after_a_pause(client, session) == "spare"
        for _ in range(8):
            filled = shell(client, session, FILL_PIDS)
            assert filled.ok, filled
            if int(filled.output["stdout"]) <= 12:
                break
        assert shell_after_a_pause(client, session) == "own"
        assert shell(client, session, "pkill -u 1000 -x sleep; true").ok
        assert shell_after_a_pause(client, session) == "spare"


def test_stop_leftovers_drops_the_waiting_spare_without_counting_it(daemon, client):
    # What a restore does first: the spare is toolrt's own, not a leftover.
    with client.session() as session:
        assert shell_after_a_pause(client, session) == "spare"
        time.sleep(1.5)  # the next call's spare waits
        agent = daemon.daemon.core.manager.get("default", session.id).sandbox.agent
        assert daemon.run(agent.stop_leftovers()) == 0
        assert shell_after_a_pause(client, session) == "spare"
