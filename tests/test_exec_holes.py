"""Holes an adversarial review found in the exec path, each reproduced
against a real sandbox: a spawn report a `cwd` could forge, a shell-state
channel any process could write, survivors of a timeout under CPU pressure,
and an idle move to the background that escaped `timeout_s`."""

from __future__ import annotations

import errno
import os

import pytest

from runtime.agent import procs
from runtime.client import Client

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


@pytest.mark.parametrize("native", [True, False], ids=["helper", "fork"])
def test_a_cwd_cannot_forge_the_outcome_of_its_call(make_daemon, native):
    daemon = make_daemon(native_spawn=native)
    with Client(daemon.target) as client, client.session() as session:
        for cwd in FORGING_CWDS:
            for _ in range(3):
                result = shell(client, session, "touch /workspace/ran; echo never", cwd=cwd)
                assert not result.ok, result
                assert result.error_code == "NOT_FOUND", result
                assert "No such file or directory" in result.error_message
        assert shell(client, session, "ls /workspace").output["stdout"] == ""
        assert shell(client, session, "echo alive").output["stdout"] == "alive\n"


def test_the_helper_reports_fixed_records_whatever_the_cwd():
    # Run on the host: it stops at dropping privileges (not root) or at the
    # cwd (root); either way its report is whole records, the cwd nowhere.
    read, write = os.pipe()
    cwd = FORGING_CWDS[0]
    argv = [procs.HELPER, "1000", "1000", "100", cwd, "/bin/true"]
    pid = os.posix_spawn(procs.HELPER, argv, {}, file_actions=[(os.POSIX_SPAWN_DUP2, write, 3)])
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    records, rest = procs.decode_reports(data)
    assert rest == b"" and b"status" not in data
    errors = [(a, b) for kind, a, b in records if kind == procs.ERROR]
    assert errors in ([(procs.STAGE_CWD, errno.ENOENT)], [(procs.STAGE_USER, errno.EPERM)])
    code, message = procs.failure_of_spawn(*errors[0], cwd)
    assert code in ("NOT_FOUND", "INTERNAL") and message.endswith(os.strerror(errors[0][1]))


@pytest.mark.parametrize(
    "data",
    [
        b"{" + b'"status": 0}' + b"\n",
        procs.encode_report(9, 0),
        procs.encode_report(procs.ERROR, 99, errno.ENOENT),
        procs.encode_report(procs.ERROR, procs.STAGE_CWD, 0),
        procs.encode_report(procs.PID, 0),
    ],
)
def test_anything_but_known_records_is_refused(data):
    with pytest.raises(procs.ReportError):
        procs.decode_reports(data)


def test_a_record_still_arriving_waits_for_its_end():
    record = procs.encode_report(procs.STATUS, 7 << 8)
    assert procs.decode_reports(record[:5]) == ([], record[:5])
    assert procs.decode_reports(record + record[:3]) == ([(procs.STATUS, 7 << 8, 0)], record[:3])
