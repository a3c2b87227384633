"""Snapshots in and out of sandboxes as tar streams, sandbox → daemon → sandbox.

Out: the agent packs the areas (`static-agent/pack.go`: O_NOFOLLOW walk, links
stored as links, sockets, FIFOs and devices left out; nothing redacted)
and `capture` reads the stream as it arrives, in a worker thread, turning
each member into a manifest entry and each regular file into a staged
blob. A name, link target or content holding a value of the session's
secrets refuses the snapshot: stored files are never rewritten, and no
byte of a value reaches the store. The stream comes from the sandbox, so it is untrusted:
names are checked here, only the blob's hash ever names a file in the
store, and setuid/setgid/sticky bits are dropped.

In: `restore_chunks` writes one area's entries back as a tar stream, read
from the blobs as the agent takes it; the agent unpacks it with
`Extract.restore` (`static-agent/extract.go`: all staged and checked before the
old contents go; links kept, never followed).
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
import tarfile
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Any

from runtime.agent.redact import Redactor
from runtime.errors import BadRequest, HoldsSecret
from runtime.snapshots.staging import CHUNK, Staging
from runtime.snapshots.store import Entry, SnapshotStore

# Tar's block; a member's data is padded to it, and two zero blocks end it.
BLOCK = 512
MODE_BITS = 0o777


class Bridge:
    """A blocking file over an async generator: the worker thread's reads
    each take one chunk from the event loop."""

    def __init__(self, chunks: AsyncIterator[bytes], loop: asyncio.AbstractEventLoop) -> None:
        self._chunks = chunks
        self._loop = loop
        self._buf = bytearray()
        self._ended = False

    def _next(self) -> bytes | None:
        async def take() -> bytes | None:
            try:
                return await self._chunks.__anext__()
            except StopAsyncIteration:
                return None

        return asyncio.run_coroutine_threadsafe(take(), self._loop).result()

    def read(self, size: int = -1) -> bytes:
        while not self._ended and (size < 0 or len(self._buf) < size):
            chunk = self._next()
            if chunk is None:
                self._ended = True
            else:
                self._buf += chunk
        if size < 0:
            size = len(self._buf)
        data = bytes(self._buf[:size])
        del self._buf[:size]
        return data


def area_and_path(name: str, areas: dict[str, str]) -> tuple[str, str]:
    """A member's (area, path below it); BadRequest for a name no pack makes."""
    parts = name.split("/")
    if (
        name.startswith("/")
        or "\x00" in name
        or any(p in ("", ".", "..") for p in parts)
        or parts[0] not in areas
    ):
        msg = f"the sandbox's archive holds an unexpected member {name[:200]!r}"
        raise BadRequest(msg)
    return parts[0], "/".join(parts[1:])


class _Unsecret:
    """A member's content as staging reads it, refused (HoldsSecret) before
    any byte of a secret value it holds is handed on: each read looks
    `ahead` bytes further, so a value split across reads is seen whole
    while its first part is still here."""

    def __init__(self, source: Any, redactor: Redactor, name: str) -> None:
        self._source = source
        self._redactor = redactor
        self._name = name
        self._ahead = max(0, redactor.longest - 1)
        self._buf = b""
        self._seen = b""  # the last bytes handed on, for a value that spans them

    def read(self, size: int) -> bytes:
        want = size + self._ahead
        while len(self._buf) < want and (more := self._source.read(want - len(self._buf))):
            self._buf += more
        if self._redactor.found(self._seen + self._buf):
            raise _holds_secret(self._redactor, self._name, "content")
        data, self._buf = self._buf[:size], self._buf[size:]
        self._seen = (self._seen + data)[-self._ahead :] if self._ahead else b""
        return data


def _holds_secret(redactor: Redactor, name: str, where: str) -> HoldsSecret:
    msg = (
        f"{redactor.redact_text(name)}: its {where} holds a value of the session's secrets, "
        "and a snapshot never stores one; remove it from the files (or rename it), then "
        "snapshot again"
    )
    return HoldsSecret(msg)


def _check_member(member: tarfile.TarInfo, path: str, redactor: Redactor) -> None:
    """HoldsSecret for a name or link target holding a secret value (`path`:
    the member's in the sandbox): those are state, never rewritten."""
    if redactor.found_text(member.name):
        raise _holds_secret(redactor, path, "name")
    if member.issym() and redactor.found_text(member.linkname):
        raise _holds_secret(redactor, path, "link target")


def _read_members(
    source: Any, staging: Staging, areas: dict[str, str], redactor: Redactor
) -> list[Entry]:
    """The manifest of the archive read from `source`; files go to `staging`.

    The archive is the sandbox's files as they are (not redacted): one holding
    a value of `redactor`'s secrets anywhere is refused, naming the path."""
    entries: list[Entry] = []
    try:
        with tarfile.open(fileobj=source, mode="r|") as tar:
            for member in tar:
                tar.members.clear()  # type: ignore[attr-defined]  # one pass: keep none
                area, path = area_and_path(member.name, areas)
                _check_member(member, posixpath.join(areas[area], path), redactor)
                if not path:
                    continue  # the area itself exists in every sandbox
                mode = member.mode & MODE_BITS
                if member.isdir():
                    entries.append(Entry(area, path, "dir", mode, mtime=int(member.mtime)))
                elif member.issym():
                    entries.append(Entry(area, path, "symlink", mode, linkname=member.linkname))
                elif member.isfile():
                    content: Any = tar.extractfile(member)
                    if content is None:
                        continue
                    if redactor.regex is not None:
                        content = _Unsecret(content, redactor, posixpath.join(areas[area], path))
                    sha = staging.add(content, member.size)
                    entries.append(
                        Entry(area, path, "file", mode, member.size, sha, mtime=int(member.mtime))
                    )
                # Anything else (pack makes none) is no part of a snapshot.
    except (tarfile.TarError, EOFError) as exc:
        msg = f"the sandbox's archive is not a readable tar stream: {exc}"
        raise BadRequest(msg) from exc
    return entries


async def capture(
    chunks: AsyncGenerator[bytes, None],
    staging: Staging,
    areas: dict[str, str],
    redactor: Redactor,
) -> list[Entry]:
    """Read the agent's archive of `areas` (name in the archive → path) into
    `staging`; the manifest, in archive order. HoldsSecret if it holds a
    value of `redactor`'s secrets."""
    async with contextlib.aclosing(chunks):
        bridge = Bridge(chunks, asyncio.get_running_loop())
        entries = await asyncio.to_thread(_read_members, bridge, staging, areas, redactor)
        # The padding after the end blocks, and the agent's final answer
        # (a failure of the pack surfaces here).
        async for _ in chunks:
            pass
    return entries


def _header(entry: Entry) -> bytes:
    info = tarfile.TarInfo(entry.path)
    info.mode = entry.mode
    info.mtime = entry.mtime
    if entry.kind == "dir":
        info.type = tarfile.DIRTYPE
    elif entry.kind == "symlink":
        info.type = tarfile.SYMTYPE
        info.linkname = entry.linkname
    else:
        info.size = entry.size
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _tar_pieces(store: SnapshotStore, entries: list[Entry], area: str) -> Iterator[bytes]:
    """The tar stream of `area`'s entries, in pieces of about CHUNK bytes
    (the agent credits each piece it takes: many small ones would make the
    transfer wait on round trips rather than bytes)."""
    buf = bytearray()
    for entry in entries:
        if entry.area != area:
            continue
        buf += _header(entry)
        if entry.kind == "file":
            with store.open_blob(entry.sha256) as blob:
                while data := blob.read(CHUNK):
                    buf += data
                    if len(buf) >= CHUNK:
                        yield bytes(buf)
                        buf.clear()
            if entry.size % BLOCK:
                buf += b"\0" * (BLOCK - entry.size % BLOCK)
        if len(buf) >= CHUNK:
            yield bytes(buf)
            buf.clear()
    buf += b"\0" * (2 * BLOCK)
    yield bytes(buf)


async def restore_chunks(
    store: SnapshotStore, entries: list[Entry], area: str
) -> AsyncGenerator[bytes, None]:
    """`_tar_pieces` as the agent takes them, each read on a worker thread."""
    pieces = _tar_pieces(store, entries, area)
    while (piece := await asyncio.to_thread(next, pieces, None)) is not None:
        yield piece


def area_name(path: str) -> str:
    """The name pack gives the top of an area (/workspace → workspace)."""
    return posixpath.basename(path.rstrip("/"))
