"""The snapshot store alone: deduplication, tenant scoping, quota, expiry, removal."""

from __future__ import annotations

import io
import pathlib
import sqlite3
import time

import pytest

from runtime.errors import AdmissionRefused, SnapshotNotFound, SnapshotRefused
from runtime.snapshots.store import USER, Entry, Snapshot, SnapshotStore, new_id


def take(store: SnapshotStore, tenant: str, files: dict[str, bytes], max_bytes=None, ttl=60.0):
    staging = store.staging(tenant, max_bytes)
    entries = [Entry("workspace", "d", "dir", 0o755)]
    for path, data in files.items():
        sha = staging.add(io.BytesIO(data), len(data))
        entries.append(Entry("workspace", path, "file", 0o644, len(data), sha))
    now = time.time()
    snapshot = Snapshot(
        new_id(), tenant, "s1", "", USER, now, now + ttl, sum(map(len, files.values())), len(files)
    )
    return store.commit(snapshot, entries, staging, max_bytes)


def blob_files(store: SnapshotStore) -> list[str]:
    import pathlib

    return [str(p) for p in pathlib.Path(store.root, "blobs").rglob("*") if p.is_file()]


@pytest.fixture
def store(tmp_path):
    s = SnapshotStore(str(tmp_path), ttl_seconds=60)
    yield s
    s.close()


def test_nothing_is_written_until_the_store_is_used(tmp_path):
    SnapshotStore(str(tmp_path / "state"), 60).close()
    assert not (tmp_path / "state").exists()


def test_forty_snapshots_of_the_same_files_store_one_copy(store):
    files = {"a": b"A" * 1000, "b": b"B" * 2000}
    ids = [take(store, "t", files).id for _ in range(40)]
    assert len(blob_files(store)) == 2
    assert store.usage("t") == 3000
    assert store.stored_bytes() == 3000
    assert [e.path for e in store.entries(ids[0])] == ["d", "a", "b"]
    for snapshot_id in ids[:-1]:
        store.delete("t", snapshot_id)
    assert len(blob_files(store)) == 2  # the last snapshot still holds them
    store.delete("t", ids[-1])
    assert blob_files(store) == []


def test_another_tenants_snapshot_is_not_found_like_a_missing_one(store):
    snap = take(store, "alice", {"a": b"x"})
    with pytest.raises(SnapshotNotFound) as theirs:
        store.get("bob", snap.id)
    with pytest.raises(SnapshotNotFound) as missing:
        store.get("bob", "snap_0")
    assert str(theirs.value).replace(snap.id, "ID") == str(missing.value).replace("snap_0", "ID")
    with pytest.raises(SnapshotNotFound):
        store.delete("bob", snap.id)
    assert store.listed("bob") == []
    assert [s.id for s in store.listed("alice")] == [snap.id]


def test_the_quota_counts_distinct_bytes_and_refuses_before_storing(store):
    take(store, "t", {"a": b"1" * 600}, max_bytes=1000)
    take(store, "t", {"a": b"1" * 600}, max_bytes=1000)  # the same blob: free
    with pytest.raises(AdmissionRefused, match="snapshot_max_bytes"):
        take(store, "t", {"a": b"1" * 600, "b": b"2" * 600}, max_bytes=1000)
    assert len(store.listed("t")) == 2
    assert len(blob_files(store)) == 1
    assert store.usage("other") == 0


def test_expired_snapshots_are_not_found_and_purged(store):
    snap = take(store, "t", {"a": b"gone"}, ttl=-1)
    with pytest.raises(SnapshotNotFound):
        store.get("t", snap.id)
    assert store.listed("t") == []
    assert blob_files(store) == []


def test_a_refused_or_broken_capture_leaves_no_staging(store, tmp_path):
    staging = store.staging("t", 10)
    with pytest.raises(AdmissionRefused):
        staging.add(io.BytesIO(b"x" * 11), 11)
    staging.discard()
    staging = store.staging("t", None)
    with pytest.raises(EOFError, match="ended inside a file"):
        staging.add(io.BytesIO(b"short"), 10)
    staging.discard()
    assert list((tmp_path / "snapshots" / "staging").iterdir()) == []


def test_reading_a_store_never_written_creates_nothing(tmp_path):
    store = SnapshotStore(str(tmp_path / "state"), 60)
    assert store.listed("t") == []
    with pytest.raises(SnapshotNotFound):
        store.delete("t", "snap_x")
    store.purge_orphans("start", set())
    assert store.usage("t") == 0
    store.close()
    assert not (tmp_path / "state").exists()


# A name that is not UTF-8, as tarfile gives it (surrogateescape).
NOT_UTF8 = b"n\xff".decode("utf-8", "surrogateescape")


def test_a_name_that_is_not_utf8_round_trips_byte_exact(store):
    staging = store.staging("t", None)
    sha = staging.add(io.BytesIO(b"data"), 4)
    entries = [
        Entry("workspace", NOT_UTF8, "file", 0o644, 4, sha),
        Entry("workspace", "link", "symlink", 0o777, linkname=NOT_UTF8),
    ]
    now = time.time()
    snap = store.commit(
        Snapshot(new_id(), "t", "s1", "", USER, now, now + 60, 4, 2), entries, staging, None
    )
    stored = store.entries(snap.id)
    assert stored == entries
    assert stored[0].path.encode("utf-8", "surrogateescape") == b"n\xff"


def test_a_commit_that_fails_leaves_no_blob_behind(store, monkeypatch):
    def broken(snapshot, entries):
        msg = "database or disk is full"
        raise sqlite3.OperationalError(msg)

    monkeypatch.setattr(store, "_insert", broken)
    with pytest.raises(sqlite3.OperationalError):
        take(store, "t", {"a": b"orphan?"})
    assert blob_files(store) == []
    assert store.listed("t") == []


def test_collect_removes_blobs_no_snapshot_references_and_keeps_the_others(store):
    kept = take(store, "t", {"a": b"kept"})
    stray = pathlib.Path(store.root, "blobs", "ab", "ab" + "0" * 62)
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"left by a crash mid-commit")
    assert store.collect() == 1
    assert not stray.exists()
    [blob] = blob_files(store)
    assert store.read_blob(store.entries(kept.id)[1].sha256) == b"kept"
    assert store.collect() == 0


def test_a_state_dir_of_the_previous_schema_upgrades(tmp_path):
    from runtime.snapshots.store import COMPONENT, Component
    from runtime.state.db import StateDB

    old = StateDB.open(str(tmp_path), [Component("snapshots", COMPONENT.migrations[:1])])
    old.conn.execute(
        "INSERT INTO snapshots VALUES ('snap_1', 't', 's', '', 'user', 0, 9e9, 1, 1, '{}')"
    )
    old.conn.execute(
        "INSERT INTO snapshot_entries VALUES ('snap_1', 0, 'workspace', 'é.txt', 'symlink',"
        " 511, 0, '', 'cible/é', 0)"
    )
    old.close()
    store = SnapshotStore(str(tmp_path), 60)
    [entry] = store.entries("snap_1")
    assert (entry.path, entry.linkname) == ("é.txt", "cible/é")
    store.delete("t", "snap_1")
    assert store.entries("snap_1") == []
    store.close()


def free_bytes(monkeypatch, free: int) -> None:
    """The state disk as if it had `free` bytes left."""
    import shutil

    usage = shutil.disk_usage("/")
    fake = type(usage)(usage.total, usage.total - free, free)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: fake)


def test_the_reserve_refuses_a_snapshot_that_would_eat_into_it(tmp_path, monkeypatch):
    store = SnapshotStore(str(tmp_path), 60, reserve_bytes=1000, share=1.0)
    free_bytes(monkeypatch, 1500)
    take(store, "t", {"a": b"1" * 400})
    with pytest.raises(SnapshotRefused, match="shares.state_reserve_bytes") as info:
        take(store, "t", {"b": b"2" * 600})
    assert info.value.quota == "shares.state_reserve_bytes"
    with pytest.raises(SnapshotRefused, match="shares.state_reserve_bytes"):
        take(store, "t", {"big": b"3" * (2 << 20)})  # streamed through a file
    assert len(blob_files(store)) == 1
    store.close()


def test_one_tenant_holds_at_most_its_share_without_any_tenant_table(tmp_path, monkeypatch):
    store = SnapshotStore(str(tmp_path), 60, reserve_bytes=0, share=0.5)
    free_bytes(monkeypatch, 2000)
    take(store, "alice", {"a": b"1" * 900})
    free_bytes(monkeypatch, 1000)  # half the snapshot space (900 + 1000) is 950
    with pytest.raises(SnapshotRefused, match="shares.snapshot_space") as info:
        take(store, "alice", {"b": b"2" * 200})
    assert info.value.quota == "shares.snapshot_space"
    take(store, "bob", {"c": b"3" * 900})
    # The tenant's own snapshot_max_bytes, lower, names itself.
    with pytest.raises(SnapshotRefused, match="snapshot_max_bytes"):
        take(store, "carol", {"d": b"4" * 200}, max_bytes=100)
    store.close()


def test_an_unfinished_fork_is_forgotten_with_its_snapshots(store):
    from runtime.snapshots.store import FORK, START

    store.fork_started("fork_1", "t")
    transient = take(store, "t", {"a": b"transient"})
    store._db.conn.execute("UPDATE snapshots SET kind = ? WHERE id = ?", (FORK, transient.id))
    made = take(store, "t", {"a": b"transient"})
    store._db.conn.execute(
        "UPDATE snapshots SET kind = ?, session_id = 'made' WHERE id = ?", (START, made.id)
    )
    kept = take(store, "t", {"b": b"user's"})
    assert store.unfinished_forks() == {"fork_1"}
    store.forget_forks({"fork_1"}, {"made"})
    assert store.unfinished_forks() == set()
    assert store.usage("t") == len(b"user's")
    assert [s.id for s in store.listed("t")] == [kept.id]
    assert len(blob_files(store)) == 1
