"""workspace_diff on the real engine: since the start, since a snapshot, within a path."""

from __future__ import annotations

import json
import threading

import psutil
import pytest

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import Client
from tests.helpers import make_tar

pytestmark = pytest.mark.docker


@pytest.fixture
def client(make_daemon, tmp_path):
    daemon = make_daemon(state_dir=str(tmp_path / "state"))
    with Client(daemon.target) as c:
        yield c


def diff(session, **arguments):
    result = session.call("workspace_diff", arguments)
    assert result.ok, result
    return result.output


def by_path(output):
    return {c["path"]: c for c in output["changes"]}


def test_changes_since_start_after_write_edit_delete_and_rename(client):
    seed = make_tar(
        ("keep.txt", "file", "same\n"),
        ("edit.py", "file", "x = 1\ny = 2\n"),
        ("gone.txt", "file", "bye\n"),
        ("old_name.txt", "file", "moving\n"),
        ("img.bin", "file", "\x00\x01\x02"),
    )
    with client.session(workspace_tar=seed) as session:
        assert diff(session) == {"changes": [], "truncated": False}
        assert session.call("write_file", {"path": "new.txt", "content": "hello\n"}).ok
        edit = {"path": "edit.py", "old_string": "y = 2", "new_string": "y = 3"}
        assert session.call("edit_file", edit).ok
        assert session.shell("rm gone.txt && mv old_name.txt new_name.txt").ok
        assert session.shell("printf '\\x00\\x09' > img.bin").ok
        changes = by_path(diff(session))
        assert set(changes) == {
            "/workspace/new.txt",
            "/workspace/edit.py",
            "/workspace/gone.txt",
            "/workspace/old_name.txt",
            "/workspace/new_name.txt",
            "/workspace/img.bin",
        }
        assert changes["/workspace/new.txt"]["status"] == "added"
        assert "+hello" in changes["/workspace/new.txt"]["diff"]
        edited = changes["/workspace/edit.py"]
        assert edited["status"] == "modified"
        assert "-y = 2\n+y = 3\n" in edited["diff"]
        assert edited["diff"].startswith("--- a/workspace/edit.py\n+++ b/workspace/edit.py\n")
        assert changes["/workspace/gone.txt"]["status"] == "deleted"
        assert "-bye" in changes["/workspace/gone.txt"]["diff"]
        assert changes["/workspace/old_name.txt"]["status"] == "deleted"
        assert changes["/workspace/new_name.txt"]["status"] == "added"
        assert changes["/workspace/img.bin"] == {
            "path": "/workspace/img.bin",
            "status": "modified",
            "binary": True,
        }
        # Restricted to a path; and a restore to the start leaves nothing to show.
        only = diff(session, path="/workspace/edit.py")
        assert [c["path"] for c in only["changes"]] == ["/workspace/edit.py"]


def test_changes_since_a_snapshot_and_from_an_empty_start(client):
    with client.session() as session:
        assert session.shell("mkdir src && echo a > src/a.txt").ok
        assert [c["status"] for c in diff(session)["changes"]] == ["added"]
        snap = session.snapshot()
        assert diff(session, since=snap.id) == {"changes": [], "truncated": False}
        assert session.shell("echo b >> src/a.txt").ok
        [change] = diff(session, since=snap.id)["changes"]
        assert change["status"] == "modified" and "+b" in change["diff"]
        # A session made from the snapshot starts there.
        with client.session(from_snapshot=snap.id) as copy:
            assert diff(copy)["changes"] == []
            assert copy.shell("rm src/a.txt").ok
            assert by_path(diff(copy))["/workspace/src/a.txt"]["status"] == "deleted"
        session.restore(snap.id)
        assert diff(session, since=snap.id)["changes"] == []


def test_bad_since_and_paths_are_the_models_errors(client):
    with client.session(allowlist={"deny_globs": ["*.secret"]}) as session:
        assert session.shell("echo s > k.secret && echo p > p.txt").ok
        assert [c["path"] for c in diff(session)["changes"]] == ["/workspace/p.txt"]
        for arguments in ({"since": "yesterday"}, {"since": "snap_nope"}, {"path": "/etc"}):
            result = session.call("workspace_diff", arguments)
            assert result.error_code in ("INVALID_ARGUMENTS", "PATH_DENIED"), arguments


class PeakRss:
    """The highest RSS of this process (the daemon's, in these tests) while open."""

    def __init__(self) -> None:
        self.process = psutil.Process()
        self.start = self.peak = self.process.memory_info().rss
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)


# Making 160 MiB of files under gVisor takes minutes on two shared cores
# (the shell call itself may take 300 s): more than pytest's 120 s default.
@pytest.mark.timeout(600)
def test_a_batch_of_diffs_of_a_big_workspace_keeps_the_daemon_small(client):
    # 1,200 text files of ~135 KiB (small enough to diff each): 160 MiB.
    make = "for i in $(seq 1200); do head -c 100000 /dev/urandom | base64 > f$i.txt; done"
    with client.session(limits={"workspace_bytes": 320 << 20}) as session:
        assert session.shell(make, timeout_s=300, idle_timeout_s=300).ok  # quiet, slow under gVisor
        snap = session.snapshot()
        edit = "echo changed >> f7.txt && rm f8.txt && echo new > new.txt"
        assert session.shell(edit).ok
        calls = [
            pb.ToolCall(
                id=f"d{i}", name="workspace_diff", arguments_json=json.dumps({"since": snap.id})
            )
            for i in range(6)
        ]
        request = pb.ExecuteBatchRequest(session_id=session.id, calls=calls)
        with PeakRss() as rss:
            results = client.stub.ExecuteBatch(request, timeout=600).results
    growth = (rss.peak - rss.start) >> 20
    # Each call read the whole workspace; the daemon kept only what changed.
    assert growth < 100, f"the daemon grew by {growth} MiB"
    for result in results:
        assert result.ok, result
        changes = {c["path"]: c for c in json.loads(result.output_json)["changes"]}
        assert {p: c["status"] for p, c in changes.items()} == {
            "/workspace/f7.txt": "modified",
            "/workspace/f8.txt": "deleted",
            "/workspace/new.txt": "added",
        }
        assert changes["/workspace/f7.txt"]["diff"].endswith("+changed\n")
        assert changes["/workspace/new.txt"]["diff"].endswith("+new\n")
