"""Background processes with handles against a real sandbox: start, find,
read (waiting for a pattern), kill with their whole tree, caps and bounds."""

from __future__ import annotations

import json

import pytest

from runtime.client import Client
from tests.helpers import user_processes

pytestmark = pytest.mark.docker

SERVER = (
    "(setsid sleep 621 &); "
    'python3 -u -c \'import time; print("starting"); time.sleep(2); '
    'print("Listening on 8000"); time.sleep(620)\''
)


def test_server_started_found_read_and_killed_with_its_tree(session, docker_client):
    started = session.shell(SERVER, background=True)
    assert started.ok, started
    handle, pid = started.output["process_id"], started.output["pid"]
    assert started.output["state"] == "running" and isinstance(pid, int)
    assert "Listening" not in started.output["stdout"]  # it returned before that
    listed = session.call("process_list", {}).output["processes"]
    assert [(p["process_id"], p["pid"], p["state"]) for p in listed] == [(handle, pid, "running")]
    assert listed[0]["command"].startswith("(setsid sleep 621 &)")
    ready = session.call(
        "process_output", {"process_id": handle, "wait_for": "Listening on \\d+", "timeout_s": 30}
    )
    assert ready.ok and ready.output["matched"] is True, ready
    assert "Listening on 8000\n" in ready.output["output"]
    assert ready.output["state"] == "running"
    # Nothing new since the last read.
    again = session.call("process_output", {"process_id": handle})
    assert again.output["output"] == "" and again.output["dropped_bytes"] == 0
    running = user_processes(docker_client, session.id)
    assert any("sleep 621" in p for p in running) and any("sleep(620)" in p for p in running)
    killed = session.call("process_kill", {"process_id": handle})
    assert killed.ok and killed.output["state"] == "killed" and killed.output["was_running"]
    left = user_processes(docker_client, session.id)
    assert not any("sleep 621" in p or "sleep(620)" in p for p in left), left
    assert session.call("process_list", {}).output["processes"][0]["state"] == "killed"
    twice = session.call("process_kill", {"process_id": handle})
    assert twice.ok and twice.output["was_running"] is False


def test_a_handle_covers_children_its_main_process_left_running(session, docker_client):
    started = session.shell("(sleep 2; echo Listening; sleep 642) & echo forked", background=True)
    handle = started.output["process_id"]
    assert started.output["stdout"] == "forked\n"
    ready = session.call(
        "process_output", {"process_id": handle, "wait_for": "Listening", "timeout_s": 30}
    )
    assert ready.output["matched"] is True
    assert ready.output["state"] == "running" and ready.output["exit_code"] == 0
    session.call("process_kill", {"process_id": handle})
    assert not any("sleep 642" in p for p in user_processes(docker_client, session.id))


def test_wait_without_pattern_until_exit_and_exit_code(session):
    started = session.shell("sleep 2; echo finished; exit 3", background=True)
    done = session.call(
        "process_output", {"process_id": started.output["process_id"], "timeout_s": 30}
    )
    assert done.output["state"] == "exited" and done.output["exit_code"] == 3
    assert done.output["output"] == "finished\n"
    # A pattern that never shows: the wait ends with the process, unmatched.
    started = session.shell("sleep 0.7; echo other", background=True)
    missed = session.call(
        "process_output",
        {"process_id": started.output["process_id"], "wait_for": "never", "timeout_s": 30},
    )
    assert missed.ok and missed.output["matched"] is False
    assert missed.output["state"] == "exited"


def test_quick_command_started_in_background_reports_its_end(session):
    result = session.shell("echo quick", background=True)
    assert result.ok and result.output["stdout"] == "quick\n"
    assert result.output["state"] == "exited" and result.output["exit_code"] == 0


def test_background_cap_is_limit_exceeded(make_daemon, docker_client):
    daemon = make_daemon(shell={"max_background": 2})
    with Client(daemon.target) as client, client.session() as session:
        first = session.shell("sleep 631", background=True).output["process_id"]
        session.shell("sleep 632", background=True)
        refused = session.shell("sleep 633", background=True)
        assert refused.error_code == "LIMIT_EXCEEDED"
        assert "process_kill" in refused.error_message
        # A silent command cannot move to the background either: it is killed.
        silent = session.shell("sleep 634", idle_timeout_s=1)
        assert silent.error_code == "TIMEOUT" and "process_id" not in silent.output
        assert "maximum" in silent.error_message
        assert not any(
            "sleep 63" + n in p for n in "34" for p in user_processes(docker_client, session.id)
        )
        session.call("process_kill", {"process_id": first})
        assert session.shell("sleep 635", background=True).ok


def test_background_output_is_bounded_by_its_ring(make_daemon):
    daemon = make_daemon(shell={"background_buffer_bytes": 4096})
    with Client(daemon.target) as client, client.session() as session:
        handle = session.shell(
            "sleep 2; head -c 100000 /dev/zero | tr '\\0' x; echo; echo END", background=True
        ).output["process_id"]
        done = session.call("process_output", {"process_id": handle, "timeout_s": 30})
        out = done.output
        assert out["state"] == "exited", out["state"]
        assert out["output"].endswith("x\nEND\n")
        assert out["dropped_bytes"] > 0
        assert len(out["output"]) + out["dropped_bytes"] == 100_005
        assert session.call("process_list", {}).output["processes"][0]["unread_bytes"] == 0


def test_unknown_handles_and_bad_patterns(session):
    missing = session.call("process_output", {"process_id": "p99"})
    assert missing.error_code == "NOT_FOUND" and "p99" in missing.error_message
    assert session.call("process_kill", {"process_id": "p99"}).error_code == "NOT_FOUND"
    bad = session.call("process_output", {"process_id": "p1", "wait_for": "(unclosed"})
    assert bad.error_code == "INVALID_ARGUMENTS" and "/wait_for" in bad.error_message


def test_process_tools_through_the_cli(daemon, session, capsys):
    from runtime.cli import main

    def cli(tool: str, arguments: str) -> tuple[int, dict]:
        code = main(["call", "--target", daemon.target, session.id, tool, arguments])
        return code, json.loads(capsys.readouterr().out)

    code, started = cli("shell", '{"command": "echo up; sleep 641", "background": true}')
    assert code == 0 and started["output"]["stdout"] == "up\n"
    handle = started["output"]["process_id"]
    code, listed = cli("process_list", "{}")
    assert [p["process_id"] for p in listed["output"]["processes"]] == [handle]
    code, killed = cli("process_kill", json.dumps({"process_id": handle}))
    assert code == 0 and killed["output"]["state"] == "killed"
