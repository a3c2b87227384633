"""Snapshot RPCs between tenants (fake sandboxes): another tenant's snapshot does not exist."""

from __future__ import annotations

import grpc
import pytest

from runtime.client import ToolrtRpcError


def refusal(call, *args) -> ToolrtRpcError:
    with pytest.raises(ToolrtRpcError) as info:
        call(*args)
    return info.value


def test_another_tenants_snapshot_is_not_found_worded_like_a_missing_one(secure_daemon, tmp_path):
    secured = secure_daemon(state_dir=str(tmp_path / "state"))
    alice, bob = secured.client("alice"), secured.client("bob")
    with alice.session() as session:
        snap = session.snapshot(label="mine")
    missing = "snap_" + "0" * 32
    with bob.session() as theirs:
        for make in (
            lambda sid: bob.restore(theirs.id, sid),
            lambda sid: bob.fork(sid, 1),
            lambda sid: bob.create_session(from_snapshot=sid),
            lambda sid: bob.delete_snapshot(sid),
        ):
            other, absent = refusal(make, snap.id), refusal(make, missing)
            assert other.code == absent.code == grpc.StatusCode.NOT_FOUND
            assert other.details.replace(snap.id, "ID") == absent.details.replace(missing, "ID")
        assert bob.list_snapshots() == []
    assert [s.id for s in bob.list_sessions()] == []
    assert [(s.id, s.label) for s in alice.list_snapshots()] == [(snap.id, "mine")]
    records = [r for r in secured.audit() if r["event"] == "snapshot"]
    assert {r["tenant"] for r in records} == {"alice", "bob"}
    assert all(r["code"] == "NOT_FOUND" for r in records if r["tenant"] == "bob")


def test_a_session_of_another_tenant_cannot_be_snapshot_or_forked(secure_daemon, tmp_path):
    secured = secure_daemon(state_dir=str(tmp_path / "state"))
    alice, bob = secured.client("alice"), secured.client("bob")
    with alice.session() as session:
        for call in (lambda: bob.snapshot(session.id), lambda: bob.fork(session.id, 2)):
            assert refusal(call).code == grpc.StatusCode.NOT_FOUND
    assert alice.list_snapshots() == []


def test_snapshots_outlive_the_daemon(make_daemon, tmp_path):
    from runtime.client import Client

    state = str(tmp_path / "state")
    first = make_daemon(backend="fake", state_dir=state)
    with Client(first.target) as client, client.session() as session:
        assert session.call("write_file", {"path": "a.txt", "content": "kept"}).ok
        snap = session.snapshot(label="L")
    first.stop()
    second = make_daemon(backend="fake", state_dir=state)
    with Client(second.target) as client:
        assert [(s.id, s.label) for s in client.list_snapshots()] == [(snap.id, "L")]
        with client.session(from_snapshot=snap.id) as copy:
            assert copy.call("read_file", {"path": "a.txt"}).output["content"] == "kept"


def test_a_full_state_directory_is_resource_exhausted_and_stores_nothing(
    make_daemon, tmp_path, monkeypatch
):
    import errno

    from runtime.client import Client
    from runtime.snapshots.staging import Staging

    def full(self, source, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Staging, "add", full)
    daemon = make_daemon(backend="fake", state_dir=str(tmp_path / "state"))
    with Client(daemon.target) as client, client.session() as session:
        assert session.call("write_file", {"path": "a.txt", "content": "x"}).ok
        error = refusal(session.snapshot)
        assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "state directory is full" in error.details
        assert client.list_snapshots() == []
    assert list((tmp_path / "state" / "snapshots" / "staging").iterdir()) == []


def test_a_fork_asks_for_secrets_again_and_no_value_is_stored(make_daemon, tmp_path):
    from runtime.client import Client

    value = "ghp_snapshotSECRET0123456789"
    secrets = tmp_path / "secrets.env"
    secrets.write_text(f"GITHUB_TOKEN={value}\n")
    secrets.chmod(0o600)
    state = tmp_path / "state"
    allowed = {"default": {"secrets": ["GITHUB_TOKEN"]}}
    first = make_daemon(
        backend="fake", state_dir=str(state), secrets_file=str(secrets), tenants=allowed
    )
    with Client(first.target) as client:
        with client.session(secrets=["GITHUB_TOKEN"]) as session:
            assert session.call("write_file", {"path": "f.txt", "content": "x"}).ok
            snap = session.snapshot()
            [fork] = session.fork(1)
            assert list(fork.info.secrets) == ["GITHUB_TOKEN"]
            fork.close()
            client.close_session(client.create_session(from_snapshot=snap.id).id)
        created = dict(client.admin_stats().sessions_created)
        assert (created["cold"], created["fork"], created["snapshot"]) == (1, 1, 1)
    first.stop()
    # The operator takes the secret away from the tenant: a fork may not have it.
    denied = {"default": {"secrets": []}}
    second = make_daemon(
        backend="fake", state_dir=str(state), secrets_file=str(secrets), tenants=denied
    )
    with Client(second.target) as client:
        assert refusal(client.fork, snap.id, 2).code == grpc.StatusCode.PERMISSION_DENIED
        assert client.list_sessions() == []
    stored = [p.read_bytes() for p in state.rglob("*") if p.is_file()]
    assert stored and not any(value.encode() in data for data in stored)


def test_blobs_no_snapshot_references_are_collected_at_start_up(make_daemon, tmp_path):
    from runtime.client import Client
    from tests.helpers import wait_for

    state = tmp_path / "state"
    first = make_daemon(backend="fake", state_dir=str(state))
    with Client(first.target) as client, client.session() as session:
        assert session.call("write_file", {"path": "a.txt", "content": "kept"}).ok
        session.snapshot()
    first.stop()
    blobs = state / "snapshots" / "blobs"
    kept = {p for p in blobs.rglob("*") if p.is_file()}
    # What a crash between a commit's renames and its manifest leaves.
    stray = blobs / "ab" / ("ab" + "0" * 62)
    stray.parent.mkdir(exist_ok=True)
    stray.write_bytes(b"referenced by nothing")
    make_daemon(backend="fake", state_dir=str(state))
    wait_for(lambda: not stray.exists())
    assert {p for p in blobs.rglob("*") if p.is_file()} == kept


def test_a_daemon_opens_its_state_database_once_for_sessions_and_snapshots(
    make_daemon, tmp_path, monkeypatch
):
    # state/db.py: one connection, used by one writer at a time. Two would
    # each hold their own view of the WAL and could interleave transactions.
    import sqlite3

    from runtime.client import Client

    opened: list[str] = []
    connect = sqlite3.connect

    def counted(path, *args, **kwargs):
        opened.append(str(path))
        return connect(path, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", counted)
    daemon = make_daemon(backend="fake", state_dir=str(tmp_path / "state"))
    with Client(daemon.target) as client, client.session() as session:
        assert session.call("write_file", {"path": "a.txt", "content": "x"}).ok
        snap = session.snapshot(label="one")
        assert [s.id for s in client.list_snapshots()] == [snap.id]
    assert opened == [str(tmp_path / "state" / "state.sqlite3")]
