"""What changed in a workspace since a snapshot: the answer of `workspace_diff`.

The workspace as it is now comes out of the sandbox the way a snapshot
does (the agent's pack: links as links, secrets redacted in text files)
and is hashed as it streams; a file's bytes are kept only when they are
small enough to diff. The other side is the snapshot's manifest, and for
a diff its blob. Nothing is stored.
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


@dataclass(frozen=True)
class Current:
    """A workspace entry now: like a manifest entry, with small files' bytes."""

    kind: str
    mode: int
    sha256: str = ""
    linkname: str = ""
    size: int = 0
    data: bytes | None = None


def _read_now(source: Any, area: str) -> dict[str, Current]:
    now: dict[str, Current] = {}
    with tarfile.open(fileobj=source, mode="r|") as tar:
        for member in tar:
            tar.members.clear()  # type: ignore[attr-defined]  # one pass: keep none
            _, path = area_and_path(member.name, {area: area})
            mode = member.mode & 0o777
            if not path or member.isdir():
                continue
            if member.issym():
                now[path] = Current("symlink", mode, linkname=member.linkname)
            elif member.isfile():
                data = tar.extractfile(member)
                if data is None:
                    continue
                digest, kept = hashlib.sha256(), bytearray()
                while chunk := data.read(CHUNK):
                    digest.update(chunk)
                    if member.size <= DIFF_MAX_BYTES:
                        kept += chunk
                small = bytes(kept) if member.size <= DIFF_MAX_BYTES else None
                now[path] = Current("file", mode, digest.hexdigest(), size=member.size, data=small)
    return now


async def workspace_now(chunks: AsyncGenerator[bytes, None], area: str) -> dict[str, Current]:
    """Every non-directory entry of the archive of one area, by path below it."""
    async with contextlib.aclosing(chunks):
        bridge = Bridge(chunks, asyncio.get_running_loop())
        now = await asyncio.to_thread(_read_now, bridge, area)
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
        if was is not None and cur is not None:
            same = (was.kind, was.sha256, was.linkname, was.mode) == (
                cur.kind,
                cur.sha256,
                cur.linkname,
                cur.mode,
            )
            if same:
                continue
        if len(changes) >= MAX_CHANGES:
            dropped += 1
            continue
        status = "added" if was is None else "deleted" if cur is None else "modified"
        change: dict[str, Any] = {"path": shown, "status": status}
        sizes = [s for s in (was.size if was else 0, cur.size if cur else 0)]
        if max(sizes) > DIFF_MAX_BYTES:
            change["too_large"] = True
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
