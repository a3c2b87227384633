"""The snapshot store alone: deduplication, tenant scoping, quota, expiry, removal."""

from __future__ import annotations

import io
import time

import pytest

from runtime.errors import AdmissionRefused, SnapshotNotFound
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
