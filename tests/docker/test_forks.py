"""ForkSession on the real engine: identical, independent, all or none, consistent."""

from __future__ import annotations

import threading

import grpc
import pytest

from runtime.client import Client, ToolrtRpcError
from tests.helpers import wait_for

pytestmark = pytest.mark.docker

STATE = "find /workspace /tmp -mindepth 1 -printf '%p %y %m %l\\n' | sort; pwd; echo $COLOR"


@pytest.fixture
def fork_daemon(make_daemon, tmp_path):
    return make_daemon(state_dir=str(tmp_path / "state"), max_sessions=6)


def out(session, command: str, **arguments) -> str:
    result = session.shell(command, **arguments)
    assert result.ok and result.output["exit_code"] == 0, result
    return str(result.output["stdout"])


def test_forks_start_identical_and_stay_independent(fork_daemon):
    with Client(fork_daemon.target) as client, client.session(env={"BASE": "b"}) as parent:
        out(parent, "mkdir -p w/x && echo 1 > w/x/f && ln -s / w/root && echo t > /tmp/t")
        out(parent, "cd w && export COLOR=red", persist_env=True)
        expected = out(parent, STATE)
        forks = parent.fork(3)
        try:
            assert len({f.id for f in forks} | {parent.id}) == 4
            for fork in forks:
                assert fork.info.limits == parent.info.limits
                assert fork.info.image == parent.info.image
                assert out(fork, STATE) == expected
                assert out(fork, "echo $BASE") == "b\n"
            for i, fork in enumerate(forks):
                out(fork, f"echo {i} > x/f && touch only{i}")
            for i, fork in enumerate(forks):
                assert out(fork, "cat x/f; ls") == f"{i}\nonly{i}\nroot\nx\n"
            assert out(parent, "cat x/f; ls") == "1\nroot\nx\n"
            # No transient snapshot is left behind, nor listed.
            assert client.list_snapshots() == []
        finally:
            for fork in forks:
                fork.close()


def test_forks_of_a_snapshot_outlive_its_session(fork_daemon):
    with Client(fork_daemon.target) as client:
        with client.session() as parent:
            out(parent, "echo kept > k.txt")
            snap = parent.snapshot()
        forks = client.fork(snap.id, 2)
        try:
            assert [out(f, "cat k.txt") for f in forks] == ["kept\n", "kept\n"]
        finally:
            for fork in forks:
                fork.close()


@pytest.mark.parametrize("count", [0, -1, 17])
def test_a_count_outside_1_to_16_is_refused(fork_daemon, count):
    with Client(fork_daemon.target) as client, client.session() as parent:
        with pytest.raises(ToolrtRpcError) as info:
            parent.fork(count)
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "1 to 16" in info.value.details
        assert [s.id for s in client.list_sessions()] == [parent.id]


def test_bad_sources_are_refused(fork_daemon):
    with Client(fork_daemon.target) as client, client.session() as parent:
        snap = parent.snapshot()
        for fields, code in [
            ({"session_id": parent.id, "snapshot_id": snap.id}, grpc.StatusCode.INVALID_ARGUMENT),
            ({}, grpc.StatusCode.INVALID_ARGUMENT),
            ({"session_id": "nope"}, grpc.StatusCode.NOT_FOUND),
            ({"snapshot_id": "snap_nope"}, grpc.StatusCode.NOT_FOUND),
        ]:
            from runtime._proto.toolruntime.v1 import runtime_pb2 as pb

            with pytest.raises(ToolrtRpcError) as info:
                client._rpc(client.stub.ForkSession, pb.ForkSessionRequest(count=1, **fields))
            assert info.value.code == code, fields


def test_a_fork_that_cannot_make_every_session_makes_none(fork_daemon):
    with Client(fork_daemon.target) as client, client.session() as parent:
        out(parent, "echo x > f")
        with pytest.raises(ToolrtRpcError) as info:
            parent.fork(6)  # with the parent, one over max_sessions
        assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert [s.id for s in client.list_sessions()] == [parent.id]
        assert client.list_snapshots() == []


def test_a_fork_during_a_write_call_sees_it_whole(fork_daemon):
    with Client(fork_daemon.target) as client, client.session() as parent:
        writer = threading.Thread(
            target=parent.shell, args=("echo a > f && sleep 1.5 && echo b >> f",)
        )
        writer.start()
        try:
            # read_file is read-only: it does not wait for the write lock.
            wait_for(lambda: parent.call("read_file", {"path": "f"}).ok, timeout=20)
            forks = parent.fork(1)
        finally:
            writer.join()
        try:
            assert out(forks[0], "cat f") == "a\nb\n"
        finally:
            forks[0].close()


def test_the_readmes_best_of_n_loop(make_daemon, tmp_path):
    from tests.helpers import make_tar

    daemon = make_daemon(state_dir=str(tmp_path / "state"), max_sessions=9)
    repo_tar = make_tar(
        ("calc.py", "file", "def add(a, b):\n    return a - b\n"),
        (
            "test_calc.py",
            "file",
            "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n",
        ),
    )
    # Eight candidate fixes of which only one is right.
    patches = [f"    return a * b + {i}\n" for i in range(7)] + ["    return a + b\n"]
    with Client(daemon.target) as c, c.session(workspace_tar=repo_tar) as base:
        start = base.snapshot(label="before patching")
        branches = c.fork(start.id, 8)
        try:
            for branch, patch in zip(branches, patches, strict=True):
                edit = {"path": "calc.py", "old_string": "    return a - b\n", "new_string": patch}
                assert branch.call("edit_file", edit).ok
            results = [b.call("run_tests", {}).output for b in branches]
            passed = [
                b for b, r in zip(branches, results, strict=True) if r["failed"] + r["errors"] == 0
            ]
            assert passed == [branches[7]]
            for branch in branches[:7]:
                branch.restore(start.id)
                assert out(branch, "cat calc.py") == "def add(a, b):\n    return a - b\n"
            # (run_tests left its caches: they are changes too.)
            changes = {
                c["path"]: c for c in branches[7].call("workspace_diff", {}).output["changes"]
            }
            change = changes["/workspace/calc.py"]
            assert change["status"] == "modified"
            assert "-    return a - b\n+    return a + b\n" in change["diff"]
            assert "/workspace/test_calc.py" not in changes
        finally:
            for branch in branches:
                branch.close()
