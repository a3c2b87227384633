"""workspace_diff's comparison alone: statuses, binary and large files, the diff budget."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncGenerator

from runtime.snapshots.diff import (
    DIFF_MAX_BYTES,
    MAX_CHANGES,
    UNCHANGED,
    Current,
    compare,
    workspace_now,
)
from runtime.snapshots.store import Entry
from tests.helpers import make_tar


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def old(path: str, data: bytes) -> Entry:
    return Entry("workspace", path, "file", 0o644, len(data), sha(data))


def now(data: bytes) -> Current:
    return Current("file", 0o644, sha(data), size=len(data), data=data)


BLOBS = {sha(d): d for d in (b"a\n", b"\x00bin", b"x" * (DIFF_MAX_BYTES + 1), b"keep\n")}


def run(before, current, budget=10_000, wanted=lambda p: True):
    return compare(before, current, BLOBS.__getitem__, "/workspace", wanted, budget)


def test_statuses_and_what_each_change_carries():
    big = b"x" * (DIFF_MAX_BYTES + 1)
    before = [
        old("text", b"a\n"),
        old("bin", b"\x00bin"),
        old("big", big),
        old("same", b"keep\n"),
        Entry("workspace", "d", "dir", 0o755),
    ]
    current = {
        "text": now(b"b\n"),
        "bin": now(b"\x00other"),
        "big": Current("file", 0o644, "f" * 64, size=len(big)),
        "same": now(b"keep\n"),
        "link": Current("symlink", 0o777, linkname="/"),
    }
    result = run(before, current)
    changes = {c["path"]: c for c in result["changes"]}
    assert list(changes) == sorted(changes)
    assert "/workspace/same" not in changes and "/workspace/d" not in changes
    assert changes["/workspace/text"]["diff"].endswith("-a\n+b\n")
    assert changes["/workspace/bin"] == {
        "path": "/workspace/bin",
        "status": "modified",
        "binary": True,
    }
    assert changes["/workspace/big"]["too_large"] is True
    assert changes["/workspace/link"]["status"] == "added"
    assert "+symlink -> /" in changes["/workspace/link"]["diff"]
    assert result["truncated"] is False


def test_diffs_past_the_budget_are_omitted_and_say_so():
    before = [old(f"f{i}", b"a\n") for i in range(3)]
    current = {f"f{i}": now(b"b\n") for i in range(3)}
    result = run(before, current, budget=60)
    assert result["truncated"] is True
    assert [("diff" in c, c.get("diff_omitted", False)) for c in result["changes"]] == [
        (True, False),
        (False, True),
        (False, True),
    ]


def test_unwanted_paths_are_left_out_and_the_list_is_capped():
    current = {f"n{i:05d}": now(b"a\n") for i in range(MAX_CHANGES + 5)}
    result = run([], current, budget=0, wanted=lambda p: not p.endswith("00000"))
    assert len(result["changes"]) == MAX_CHANGES
    assert result["more_changes"] == 4
    assert result["truncated"] is True
    assert "/workspace/n00000" not in {c["path"] for c in result["changes"]}


def test_only_changed_files_asked_for_are_kept_and_within_the_bound():
    before = [old("same", b"keep\n"), old("text", b"a\n"), old("hidden", b"a\n")]
    archive = make_tar(
        ("workspace/same", "file", b"keep\n"),
        ("workspace/text", "file", b"b\n"),
        ("workspace/hidden", "file", b"b\n"),
        ("workspace/new1", "file", b"1\n" * 8),
        ("workspace/new2", "file", b"2\n" * 8),
    )

    async def chunks() -> AsyncGenerator[bytes, None]:
        yield archive

    def wanted(path: str) -> bool:
        return not path.endswith("hidden")

    current = asyncio.run(workspace_now(chunks(), "workspace", before, wanted, keep_max=20))
    assert current["same"] is UNCHANGED
    assert current["text"].data == b"b\n" and current["hidden"].data is None
    # new1 fits in the 20 bytes with text's 2; new2 does not.
    assert current["new1"].data == b"1\n" * 8
    assert current["new2"].data is None and current["new2"].omitted
    changes = {c["path"]: c for c in run(before, current)["changes"]}
    assert changes["/workspace/new2"] == {
        "path": "/workspace/new2",
        "status": "added",
        "diff_omitted": True,
    }
    assert changes["/workspace/new1"]["diff"].endswith("+1\n")
