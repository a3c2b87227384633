"""Snapshots on the real engine: take, restore in place, start a session from one."""

from __future__ import annotations

import grpc
import pytest

from runtime.client import Client, ToolrtRpcError
from tests.helpers import user_processes

pytestmark = pytest.mark.docker

# Every kind of entry a workspace can hold, the hostile ones included.
HOSTILE = (
    "mkdir -p src/deep && printf 'print(1)\\n' > src/app.py && printf 'data' > src/deep/d.bin"
    " && ln -s / src/root && ln -s ../app.py src/deep/up && ln src/app.py src/hard.py"
    " && mkfifo src/fifo && cp /bin/true src/suid && chmod 4755 src/suid"
    " && python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('src/sock')\""
)
# What a restore must bring back: names, types, modes and contents (no
# mtimes: a restore writes files anew).
LISTING = (
    "find /workspace -mindepth 1 -printf '%p %y %m %l\\n' | sort;"
    " md5sum $(find /workspace -type f | sort)"
)


@pytest.fixture
def snap_client(make_daemon, tmp_path):
    daemon = make_daemon(state_dir=str(tmp_path / "state"))
    with Client(daemon.target) as client:
        yield client


def out(session, command: str, **arguments) -> str:
    result = session.shell(command, **arguments)
    assert result.ok and result.output["exit_code"] == 0, result
    return str(result.output["stdout"])


def test_restore_after_rm_brings_back_files_cwd_and_env(snap_client):
    with snap_client.session() as session:
        out(session, HOSTILE)
        out(session, "cd src/deep && export GREETING='hi there'", persist_env=True)
        before = out(session, LISTING)
        snap = session.snapshot(label="before")
        assert snap.id.startswith("snap_") and snap.label == "before"
        assert snap.session_id == session.id
        assert snap.files >= 6 and snap.bytes > 0
        assert snap.expires_at > snap.created_at
        out(
            session,
            "cd /workspace && rm -rf /workspace/* && export GREETING=gone",
            persist_env=True,
        )
        assert out(session, "cd /workspace && ls -A") == ""
        assert session.restore(snap.id) == []
        assert out(session, "pwd; echo $GREETING") == "/workspace/src/deep\nhi there\n"
        after = out(session, LISTING)
        # FIFOs and sockets are not kept; the setuid bit is dropped; the hard
        # link comes back as a copy with the same content; the link to / as a link.
        expected = [
            line.replace(" 4755 ", " 755 ")
            for line in before.splitlines()
            if " p " not in line and " s " not in line
        ]
        assert after.splitlines() == expected
        assert "/workspace/src/root l 777 /" in after
        assert ".toolrt-extract" not in out(session, "cd /workspace && ls -A")


def test_a_session_from_a_snapshot_starts_with_its_files_and_shell_state(snap_client):
    with snap_client.session() as session:
        out(session, "mkdir -p a/b && echo hello > a/b/f.txt && cd a", persist_env=False)
        out(session, "export MODE=fast", persist_env=True)
        snap = session.snapshot()
    with snap_client.session(from_snapshot=snap.id) as copy:
        assert out(copy, "pwd; cat b/f.txt; echo $MODE") == "/workspace/a\nhello\nfast\n"
    listed = snap_client.list_snapshots()
    assert [s.id for s in listed] == [snap.id]


def test_restore_stops_background_processes_and_includes_tmp_when_asked(snap_client):
    with snap_client.session() as session:
        out(session, "echo t > /tmp/t.txt && echo w > w.txt")
        snap = session.snapshot(include_tmp=True)
        out(session, "rm /tmp/t.txt w.txt && echo extra > /tmp/extra")
        started = session.shell("sleep 600", background=True)
        process_id = started.output["process_id"]
        assert session.restore(snap.id) == [process_id]
        assert out(session, "cat /tmp/t.txt w.txt; (cd /tmp && ls)") == "t\nw\nt.txt\n"
        listed = session.call("process_list", {}).output["processes"]
        assert all(p["state"] != "running" for p in listed)


def test_a_restored_session_runs_no_process_it_had_before(snap_client, docker_client):
    # Processes a command left behind, not only background handles: a
    # nohup'd loop rewriting the workspace, a setsid'd double fork.
    with snap_client.session() as session:
        snap = session.snapshot()
        handle = session.shell("sleep 600", background=True).output["process_id"]
        out(
            session,
            "nohup sh -c 'while :; do echo INJECTED > /workspace/evil; sleep 0.05; done'"
            " >/dev/null 2>&1 & (setsid sh -c 'sleep 600 & sleep 600' &) ; sleep 0.3",
        )
        reply = snap_client.restore(session.id, snap.id)
        assert list(reply.stopped_process_ids) == [handle]
        # The loop and its sleep (at times), the setsid'd shell and its two sleeps.
        assert reply.stopped_other_processes >= 4, reply
        assert user_processes(docker_client, session.id) == []
        assert out(session, "find /workspace -mindepth 1") == ""


def test_unknown_and_deleted_snapshot_ids_are_not_found(snap_client):
    with snap_client.session() as session:
        snap = session.snapshot()
        snap_client.delete_snapshot(snap.id)
        for bad in (snap.id, "snap_nope", ""):
            with pytest.raises(ToolrtRpcError) as info:
                session.restore(bad)
            assert info.value.code == grpc.StatusCode.NOT_FOUND
            with pytest.raises(ToolrtRpcError) as info:
                snap_client.create_session(from_snapshot=bad or "x")
            assert info.value.code == grpc.StatusCode.NOT_FOUND
        with pytest.raises(ToolrtRpcError) as info:
            snap_client.delete_snapshot(snap.id)
        assert info.value.code == grpc.StatusCode.NOT_FOUND
        assert snap_client.list_snapshots() == []
    assert snap_client.list_sessions() == []


def test_a_snapshot_too_big_for_the_target_is_refused_and_changes_nothing(snap_client):
    with snap_client.session(limits={"workspace_bytes": 64 << 20}) as big:
        out(big, "head -c 3000000 /dev/urandom > blob")
        snap = big.snapshot()
    with snap_client.session(limits={"workspace_bytes": 2 << 20}) as small:
        out(small, "echo keep > keep.txt")
        with pytest.raises(ToolrtRpcError) as info:
            small.restore(snap.id)
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "workspace_bytes" in info.value.details
        assert out(small, "ls") == "keep.txt\n"
    with pytest.raises(ToolrtRpcError) as info:
        snap_client.create_session(from_snapshot=snap.id, limits={"workspace_bytes": 2 << 20})
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert snap_client.list_sessions() == []


def test_the_tenants_snapshot_quota_refuses_before_storing(make_daemon, tmp_path):
    state = tmp_path / "state"
    daemon = make_daemon(
        state_dir=str(state), tenants={"default": {"snapshot_max_bytes": 1_500_000}}
    )
    with Client(daemon.target) as client, client.session() as session:
        out(session, "head -c 1000000 /dev/urandom > one")
        first = session.snapshot()
        # Unchanged files are stored once: a second snapshot costs no quota.
        second = session.snapshot()
        out(session, "head -c 1000000 /dev/urandom > two")
        with pytest.raises(ToolrtRpcError) as info:
            session.snapshot()
        assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "snapshot_max_bytes" in info.value.details
        assert {s.id for s in client.list_snapshots()} == {first.id, second.id}
        blobs = [p for p in (state / "snapshots" / "blobs").rglob("*") if p.is_file()]
        assert len(blobs) == 1
        assert not list((state / "snapshots" / "staging").iterdir())
        client.delete_snapshot(first.id)
        client.delete_snapshot(second.id)
        assert not [p for p in (state / "snapshots" / "blobs").rglob("*") if p.is_file()]


def test_the_cli_snapshots_forks_restores_lists_and_deletes(make_daemon, tmp_path, capsys):
    from runtime.cli.main import main as cli_main

    daemon = make_daemon(state_dir=str(tmp_path / "state"))
    target = ["--target", daemon.target]
    with Client(daemon.target) as client, client.session() as session:
        out(session, "echo v1 > f")
        assert cli_main(["snapshot", session.id, "--label", "first", *target]) == 0
        line = capsys.readouterr().out
        snap_id = line.split("\t")[0]
        assert snap_id.startswith("snap_") and line.rstrip().endswith("label=first")
        assert cli_main(["snapshots", "ls", *target]) == 0
        assert capsys.readouterr().out.split("\t")[0] == snap_id
        assert cli_main(["fork", snap_id, "-n", "2", *target]) == 0
        fork_ids = capsys.readouterr().out.split()
        assert len(fork_ids) == 2
        for fork_id in fork_ids:
            assert client.call(fork_id, "read_file", {"path": "f"}).output["content"] == "v1\n"
            client.close_session(fork_id)
        out(session, "echo v2 > f")
        assert cli_main(["restore", session.id, snap_id, *target]) == 0
        assert "stopped processes: none" in capsys.readouterr().out
        assert out(session, "cat f") == "v1\n"
        assert cli_main(["snapshots", "rm", snap_id, *target]) == 0
        assert cli_main(["fork", snap_id, *target]) == 2
        assert "NOT_FOUND" in capsys.readouterr().err
