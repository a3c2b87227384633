"""The state disk on the real engine: any file name round-trips through
snapshots, forks, restores and workspace_tar; a tenant filling its share of
the disk is refused while another tenant is served as usual."""

from __future__ import annotations

import shutil
from pathlib import Path

import grpc
import pytest

from runtime.client import Client, ToolrtRpcError
from runtime.snapshots.store import FORK
from tests.helpers import make_tar
from tests.unit.secured import issue_tokens

pytestmark = pytest.mark.docker

# A name that is not UTF-8 (`printf 'n\xff'`), as the file system has it.
NAME = b"n\xff"
MAKE = "printf data > \"/workspace/$(printf 'n\\377')\" && ln -s \"$(printf 'n\\377')\" link"
# The workspace's names and link targets as Python bytes reprs, byte-exact.
NAMES = (
    "python3 -c \"import os; print(sorted((n, os.readlink(b'/workspace/' + n)"
    " if os.path.islink(b'/workspace/' + n) else open(b'/workspace/' + n, 'rb').read())"
    " for n in os.listdir(b'/workspace')))\""
)
EXPECTED = repr(sorted([(b"link", NAME), (NAME, b"data")])) + "\n"


def out(session, command: str) -> str:
    result = session.shell(command)
    assert result.ok and result.output["exit_code"] == 0, result
    return str(result.output["stdout"])


def blobs(state: Path) -> set[str]:
    return {p.name for p in (state / "snapshots" / "blobs").rglob("*") if p.is_file()}


def test_a_name_that_is_not_utf8_round_trips_everywhere(make_daemon, tmp_path):
    state = tmp_path / "state"
    daemon = make_daemon(state_dir=str(state))
    with Client(daemon.target) as client, client.session() as session:
        out(session, MAKE)
        assert out(session, NAMES) == EXPECTED
        snap = session.snapshot()
        [fork] = session.fork(1)
        with fork:
            assert out(fork, NAMES) == EXPECTED
        out(session, "rm -f /workspace/*")
        session.restore(snap.id)
        assert out(session, NAMES) == EXPECTED
        with client.session(from_snapshot=snap.id) as copy:
            assert out(copy, NAMES) == EXPECTED
    tar = make_tar(
        (NAME.decode("utf-8", "surrogateescape"), "file", b"data"),
        ("link", "symlink", NAME.decode("utf-8", "surrogateescape")),
    )
    with Client(daemon.target) as client, client.session(workspace_tar=tar) as seeded:
        assert out(seeded, NAMES) == EXPECTED
        # Its start snapshot was taken: workspace_diff can answer.
        diff = seeded.call("workspace_diff", {})
        assert diff.ok and diff.output["changes"] == [], diff
    assert client_snapshots_bytes(daemon) == 4
    # Every blob in the store belongs to a snapshot.
    assert len(blobs(state)) == 1


def client_snapshots_bytes(daemon) -> int:
    store = daemon.daemon.core.snapshots.store
    return store.usage("default")


def test_a_tenant_filling_its_share_of_the_state_disk_leaves_another_served(make_daemon, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    tokens_file = tmp_path / "tokens"
    tokens, _ = issue_tokens(tokens_file)
    # About 4 MiB of snapshot space for each tenant (the disk's other users
    # move its free bytes by far less than the 1 MiB margins below).
    free = shutil.disk_usage(state).free
    daemon = make_daemon(
        state_dir=str(state),
        auth={"tokens_file": str(tokens_file)},
        shares={"state_reserve_bytes": 0, "snapshot_space": (4 << 20) / free},
    )
    with (
        Client(daemon.target, token=tokens["alice"]) as alice,
        Client(daemon.target, token=tokens["bob"]) as bob,
    ):
        with alice.session() as session:
            out(session, "head -c 2500000 /dev/urandom > one")
            kept = session.snapshot()
            out(session, "head -c 2500000 /dev/urandom > two")
            with pytest.raises(ToolrtRpcError) as info:
                session.snapshot()
            assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "shares.snapshot_space" in info.value.details
            # Its fork's transient snapshot needs room too: refused, nothing made.
            with pytest.raises(ToolrtRpcError) as info:
                session.fork(1)
            assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert [s.id for s in alice.list_snapshots()] == [kept.id]
            # A seeded session still starts, without a start snapshot, and says why.
            seed = make_tar(("big", "file", b"x" * 3_000_000))
            with alice.session(workspace_tar=seed) as seeded:
                diff = seeded.call("workspace_diff", {})
                assert not diff.ok and "shares.snapshot_space" in diff.error_message, diff
                assert out(seeded, "wc -c < big") == "3000000\n"
        with bob.session() as theirs:
            assert out(theirs, "echo served") == "served\n"
            assert theirs.upload(make_tar(("up.txt", "file", b"up"))) == (1, 2)
            assert b"up" in theirs.download(["/workspace/up.txt"])
            out(theirs, "head -c 2500000 /dev/urandom > mine")
            assert theirs.snapshot().bytes == 2500002  # with up.txt
    metrics = daemon.daemon.core.obs.metrics
    refused = metrics.totals(metrics.snapshot_refusals, "quota")
    assert refused == {"shares.snapshot_space": 3.0}
    store = daemon.daemon.core.snapshots.store
    assert store.usage("alice") == 2500000 and store.usage("bob") == 2500002
    assert store.listed("alice", FORK) == []
    assert len(blobs(state)) == 3
