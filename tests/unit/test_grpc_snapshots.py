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
