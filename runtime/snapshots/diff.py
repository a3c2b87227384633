"""What changed in a workspace since a snapshot: the answer of `workspace_diff`.

The workspace as it is now comes out of the sandbox the way a snapshot
does (the agent's pack: links as links, secrets redacted in text files)
and is hashed as it streams. The other side is the snapshot's manifest,
and for a diff its blob. Nothing is stored.

The daemon's memory one call takes is bounded, whatever the workspace
holds: files are compared by hash as they stream, and a file's bytes are
kept only when it changed, is asked for, is small enough to diff and fits
in `KEEP_MAX_BYTES` with the others kept; a changed file past that is
listed with `diff_omitted`. Unchanged files are remembered by path only.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import hashlib
import tarfile
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

from runtime.snapshots.archive import Bridge, area_and_path
from runtime.snapshots.staging import CHUNK
from runtime.snapshots.store import Entry

# Files larger than this are compared by hash only.
DIFF_MAX_BYTES = 256 << 10
# Changes listed at most (the rest are counted).
MAX_CHANGES = 1000
# Bytes of changed files one call keeps to diff (a diff is cut at the
# output cap, 8 MiB at most, long before this is reached).
KEEP_MAX_BYTES = 16 << 20


@dataclass(frozen=True)
class Current:
    """A workspace entry now: like a manifest entry, with a changed small
    file's bytes (`omitted` when they were not kept)."""

    kind: str
    mode: int
    sha256: str = ""
    linkname: str = ""
    size: int = 0
    data: bytes | None = None
    omitted: bool = False


# A file or link just as the baseline has it (only its path is kept).
UNCHANGED = Current("unchanged", 0)


def _same(was: Entry | None, cur: Current) -> bool:
    if cur is UNCHANGED:
        return True
    if was is None:
        return False
    return (was.kind, was.sha256, was.linkname, was.mode) == (
        cur.kind,
        cur.sha256,
        cur.linkname,
        cur.mode,
    )


@dataclass
class _Reader:
    """One pass over the archive of the workspace now."""

    area: str
    before: dict[str, Entry]
    wanted: Callable[[str], bool]
    keep_max: int
    kept: int = 0

    def read(self, source: Any) -> dict[str, Current]:
        now: dict[str, Current] = {}
        with tarfile.open(fileobj=source, mode="r|") as tar:
            for member in tar:
                tar.members.clear()  # type: ignore[attr-defined]  # one pass: keep none
                _, path = area_and_path(member.name, {self.area: self.area})
                mode = member.mode & 0o777
                if not path or member.isdir():
                    continue
                if member.issym():
                    cur = Current("symlink", mode, linkname=member.linkname)
                elif member.isfile():
                    data = tar.extractfile(member)
                    if data is None:
                        continue
                    cur = self._file(path, mode, member.size, data)
                else:
                    continue
                now[path] = UNCHANGED if _same(self.before.get(path), cur) else cur
        return now

    def _file(self, path: str, mode: int, size: int, data: Any) -> Current:
        # Bytes are held while hashing only if they may be shown; dropped
        # at once when the hash says the file did not change.
        room = self.kept + size <= self.keep_max
        small = size <= DIFF_MAX_BYTES and self.wanted(f"/{self.area}/{path}")
        digest, held = hashlib.sha256(), bytearray()
        while chunk := data.read(CHUNK):
            digest.update(chunk)
            if small and room:
                held += chunk
        cur = Current("file", mode, digest.hexdigest(), size=size)
        if not small or _same(self.before.get(path), cur):
            return cur
        if not room:
            return Current("file", mode, cur.sha256, size=size, omitted=True)
        self.kept += size
        return Current("file", mode, cur.sha256, size=size, data=bytes(held))


async def workspace_now(
    chunks: AsyncGenerator[bytes, None],
    area: str,
    before: list[Entry],
    wanted: Callable[[str], bool],
    keep_max: int = KEEP_MAX_BYTES,
) -> dict[str, Current]:
    """Every non-directory entry of the archive of one area, by path below
    it: `UNCHANGED` where it is as in `before`; a changed file's bytes when
    `wanted` (its path under the area) asks for it and they fit."""
    reader = _Reader(area, {e.path: e for e in before if e.kind != "dir"}, wanted, keep_max)
    async with contextlib.aclosing(chunks):
        bridge = Bridge(chunks, asyncio.get_running_loop())
        now = await asyncio.to_thread(reader.read, bridge)
        async for _ in chunks:
            pass
    return now


def _text(data: bytes | None) -> list[str] | None:
    if data is None or b"\0" in data:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _side(kind: str, linkname: str, data: bytes | None) -> list[str] | None:
    """A side of a diff as lines; None when it cannot be shown as text."""
    if kind == "symlink":
        return [f"symlink -> {linkname}\n"]
    return _text(data)


def compare(
    before: list[Entry],
    now: dict[str, Current],
    read_blob: Callable[[str], bytes],
    prefix: str,
    wanted: Callable[[str], bool],
    budget: int,
) -> dict[str, Any]:
    """`changes[{path, status, diff? | binary? | too_large?}]` sorted by path,
    paths shown under `prefix`; diffs stop at `budget` characters."""
    old = {e.path: e for e in before if e.kind != "dir"}
    changes: list[dict[str, Any]] = []
    dropped = 0
    truncated = False
    for path in sorted(old.keys() | now.keys()):
        shown = f"{prefix}/{path}"
        if not wanted(shown):
            continue
        was, cur = old.get(path), now.get(path)
        if cur is not None and _same(was, cur):
            continue
        if len(changes) >= MAX_CHANGES:
            dropped += 1
            continue
        status = "added" if was is None else "deleted" if cur is None else "modified"
        change: dict[str, Any] = {"path": shown, "status": status}
        sizes = [s for s in (was.size if was else 0, cur.size if cur else 0)]
        if max(sizes) > DIFF_MAX_BYTES:
            change["too_large"] = True
        elif (cur is not None and cur.omitted) or budget <= 0:
            # Not kept, or no room left to show it: not read, not diffed.
            truncated = True
            change["diff_omitted"] = True
        else:
            a = (
                _side(was.kind, was.linkname, read_blob(was.sha256) if was.kind == "file" else None)
                if was
                else []
            )
            b = _side(cur.kind, cur.linkname, cur.data) if cur else []
            if a is None or b is None:
                change["binary"] = True
            elif a == b:
                change["mode_changed"] = True
            else:
                text = "".join(difflib.unified_diff(a, b, f"a{shown}", f"b{shown}"))
                if len(text) > budget:
                    truncated = True
                    change["diff_omitted"] = True
                else:
                    budget -= len(text)
                    change["diff"] = text
        changes.append(change)
    result: dict[str, Any] = {"changes": changes, "truncated": truncated or bool(dropped)}
    if dropped:
        result["more_changes"] = dropped
    return result
