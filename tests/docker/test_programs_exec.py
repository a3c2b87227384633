"""Exec for programs against the real engine: bytes in and out of any size,
argv as given, the process tree killed on timeout and on a cancelled RPC,
and refusals with their reasons before anything starts."""

from __future__ import annotations

import hashlib
import os

import pytest

from runtime.client import (
    Client,
    RemoteFileNotFoundError,
    RemotePermissionError,
    ToolrtRpcError,
)
from tests.helpers import user_processes, wait_for

pytestmark = pytest.mark.docker


def test_64_mib_of_binary_stdin_round_trips_through_sha256sum(session):
    data = os.urandom(1 << 20) * 64
    result = session.exec(["sha256sum"], stdin=data)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()
    assert result.pid > 0 and result.exec_id


def test_1_mib_of_argv_arrives_whole(session):
    args = [chr(ord("a") + i) * (64 << 10) for i in range(16)]
    result = session.exec(
        ["sh", "-c", 'for a in "$@"; do printf "%s\\n" "${#a}"; done', "sh", *args]
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split() == [str(64 << 10).encode()] * 16


def test_10_mib_of_stdout_arrives_whole(session):
    result = session.exec(command="head -c 10485760 /dev/urandom | tee /tmp/out | wc -c >&2")
    assert result.exit_code == 0 and result.stderr.strip() == b"10485760"
    whole = session.exec(["cat", "/tmp/out"])
    assert len(whole.stdout) == 10 << 20 and whole.stdout_dropped_bytes == 0
    assert (
        hashlib.sha256(whole.stdout).hexdigest()
        == hashlib.sha256(session.read_file_bytes("/tmp/out")).hexdigest()
    )


def test_output_past_the_cap_is_counted_not_sent(session):
    result = session.exec(command="head -c 5000 /dev/zero", output_cap_bytes=1000)
    assert len(result.stdout) == 1000 and result.stdout_dropped_bytes == 4000


def test_cwd_anywhere_the_user_may_enter_and_env_on_top(session):
    result = session.exec(["ls"], cwd="/usr/bin", env={"X": "1"})
    assert b"sh\n" in result.stdout
    assert session.exec(command="pwd; echo $X", cwd="/tmp", env={"X": "y"}).stdout == b"/tmp\ny\n"
    assert session.exec(["pwd"]).stdout == b"/workspace\n"


def test_a_signalled_process_says_so(session):
    result = session.exec(command="kill -TERM $$")
    assert (result.exit_code, result.signal) == (128 + 15, "TERM")


def test_a_missing_or_unexecutable_program_is_refused_before_it_starts(session):
    with pytest.raises(RemoteFileNotFoundError) as missing:
        session.exec(["no-such-program"])
    assert missing.value.reason == "FILE_NOT_FOUND"
    session.write_file_bytes("/workspace/script", b"#!/bin/sh\necho hi\n", mode=0o644)
    with pytest.raises(RemotePermissionError):
        session.exec(["/workspace/script"])
    with pytest.raises(RemoteFileNotFoundError):
        session.exec(["true"], cwd="/nonexistent")
    with pytest.raises(ToolrtRpcError) as not_dir:
        session.exec(["true"], cwd="/etc/passwd")
    assert not_dir.value.reason == "NOT_A_DIRECTORY"
    with pytest.raises(RemotePermissionError) as user:
        session.exec(["true"], user="root")
    assert user.value.reason == "USER_NOT_ALLOWED"


def test_a_timeout_kills_the_whole_tree(session, docker_client):
    result = session.exec(command="sleep 1000 & sleep 1001 & echo started; wait", timeout_s=1)
    assert result.timed_out and result.signal in ("TERM", "KILL"), result
    assert result.stdout == b"started\n"
    wait_for(lambda: not any("sleep 100" in p for p in user_processes(docker_client, session.id)))


def test_a_cancelled_rpc_kills_the_whole_tree(session, docker_client):
    stream = session.exec_stream(command="sleep 2000 & sleep 2001 & echo up; wait")
    events = stream.events()
    assert next(events)[0] == "started"
    assert next(events) == ("stdout", b"up\n")
    wait_for(lambda: any("sleep 200" in p for p in user_processes(docker_client, session.id)))
    stream.cancel()
    wait_for(lambda: not any("sleep 200" in p for p in user_processes(docker_client, session.id)))


def test_stdin_signals_and_eof_reach_the_program(session):
    with session.exec_stream(["cat"]) as stream:
        events = stream.events()
        assert next(events)[0] == "started"
        stream.write(b"\x00\xff\xc3\x28")
        assert next(events) == ("stdout", b"\x00\xff\xc3\x28")
        stream.close_stdin()
        kind, ended = next(events)
        assert kind == "exit" and ended.exit_code == 0
    with session.exec_stream(["sleep", "1000"]) as stream:
        events = stream.events()
        assert next(events)[0] == "started"
        stream.signal("INT")
        kind, ended = next(events)
        assert (kind, ended.exit_code, ended.signal) == ("exit", 130, "INT")


def test_secrets_are_redacted_from_output_and_files(make_daemon, tmp_path):
    secrets = tmp_path / "secrets.env"
    secrets.write_text("TOKEN=s3cr3t-value-123\n")
    secrets.chmod(0o600)
    daemon = make_daemon(secrets_file=str(secrets), tenants={"default": {"secrets": ["TOKEN"]}})
    with Client(daemon.target) as client, client.session(secrets=["TOKEN"]) as session:
        result = session.exec(command="echo $TOKEN; echo $TOKEN > /tmp/t")
        assert result.exit_code == 0 and result.stdout.strip()
        assert b"s3cr3t" not in result.stdout
        assert b"s3cr3t" not in session.read_file_bytes("/tmp/t")


def test_a_restore_ends_running_execs_and_close_ends_them_too(client, docker_client):
    with client.session() as session:
        snapshot = session.snapshot()
        with session.exec_stream(["sleep", "3000"]) as stream:
            events = stream.events()
            assert next(events)[0] == "started"
            session.restore(snapshot.id)
            kind, ended = next(events)
            assert (kind, ended.signal) == ("exit", "KILL")
        closing = session.exec_stream(["sleep", "3001"])
        events = closing.events()
        assert next(events)[0] == "started"
    with pytest.raises(ToolrtRpcError) as closed:
        list(events)
    assert closed.value.reason == "SANDBOX_LOST"


def test_a_client_that_does_not_read_holds_the_program_back(session, docker_client):
    size = 32 << 20
    command = f"head -c {size} /dev/zero; echo written >&2"
    with session.exec_stream(command=command, stdin_open=False) as stream:
        events = stream.events()
        assert next(events)[0] == "started"

        # Unread, the output waits in the program's pipe, not in the daemon:
        # a window of events and the pipes hold far less than the output, so
        # the program cannot end (without flow control it would, at once).
        def head_runs() -> bool:
            return any(p.startswith("head -c") for p in user_processes(docker_client, session.id))

        wait_for(head_runs)  # sh starts it just after `started`
        for _ in range(30):
            assert head_runs()
        got, err, ended = 0, b"", None
        for kind, value in events:
            if kind == "stdout":
                got += len(value)
            elif kind == "stderr":
                err += value
            elif kind == "exit":
                ended = value
        assert (got, err, ended.exit_code, ended.stdout_dropped_bytes) == (size, b"written\n", 0, 0)


def test_a_retried_start_of_a_running_exec_id_is_refused_not_run_twice(session):
    with session.exec_stream(["sleep", "100"], exec_id="job-1") as first:
        events = first.events()
        kind, started = next(events)
        assert (kind, started.exec_id) == ("started", "job-1")
        with pytest.raises(ToolrtRpcError) as again:
            session.exec(["touch", "/tmp/ran-twice"], exec_id="job-1")
        assert again.value.reason == "INVALID_REQUEST" and "job-1" in str(again.value)
        first.signal("KILL")
        assert [value for kind, value in events if kind == "exit"][0].signal == "KILL"
    assert session.stat("/tmp/ran-twice").exists is False
    # Once it has ended, the id names a new exec.
    assert session.exec(["true"], exec_id="job-1").exit_code == 0
