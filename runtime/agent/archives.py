"""Tar archives into the sandbox (UploadFiles, workspace_tar), as the sandbox user.

The archive is read in one pass as it arrives (tarfile's stream mode over
the transfer's Inflow, flow.py, decompressed on the way when it is gzip,
bzip2 or xz, of one or several concatenated members): every member is checked as its header
comes (no absolute paths, no `..`, no devices, FIFOs or setuid bits,
symlinks and hard links only inside the archive's root, its size within
the free space), and written into a staging directory in the destination's
filesystem without following any link. Once the archive has ended, every
link it created is resolved for real, and only then are the entries
renamed into place: a refusal at any point changes nothing.

A restore (a snapshot the daemon stored, `Extract.restore`) differs in two
ways: symlinks are kept whatever they point at (a snapshot keeps a link to
`/` as it was; staging and the moves never follow one), and the
destination's old contents are removed after staging, before the moves.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tarfile
import uuid
from typing import Any, Container, NamedTuple

from . import budget, protocol
from .files import (
    CHUNK,
    FileOpError,
    _components,
    _kind,
    open_dir,
    open_parent,
)
from .protocol import INVALID_ARGUMENTS, LIMIT_EXCEEDED

# Entries of one archive: each costs the agent a little memory however small
# it is on the wire, and an upload is no longer bounded in size.
MAX_MEMBERS = 500_000
FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Staged(NamedTuple):
    """What is left of a member once written: enough to check and move it."""

    clean: str  # its path below the root, normalized ("" for the root)
    kind: str  # "dir", "symlink" or "file"
    name: str  # as the archive spelled it, for messages


def _clean(path: str) -> str:
    """A relative archive path without empty and `.` components."""
    return "/".join(p for p in path.split("/") if p not in ("", "."))


def _check_member(member: tarfile.TarInfo, names: Container[str], keep_links: bool) -> str:
    name = member.name
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if name.startswith("/") or "\x00" in name:
        raise FileOpError(INVALID_ARGUMENTS, f"archive member {name!r}: absolute path")
    if ".." in parts:
        raise FileOpError(INVALID_ARGUMENTS, f"archive member {name!r}: '..' in the path")
    if (
        member.isdev()
        or member.isfifo()
        or not (member.isfile() or member.isdir() or member.issym() or member.islnk())
    ):
        raise FileOpError(INVALID_ARGUMENTS, f"archive member {name!r}: device or special file")
    if member.mode & (stat.S_ISUID | stat.S_ISGID):
        raise FileOpError(INVALID_ARGUMENTS, f"archive member {name!r}: setuid/setgid bit")
    clean = "/".join(parts)
    if member.issym() and not keep_links:
        target = member.linkname
        depth = len(parts) - 1
        if target.startswith("/") or "\x00" in target:
            raise FileOpError(
                INVALID_ARGUMENTS, f"archive member {name!r}: link to an absolute path"
            )
        for part in target.split("/"):
            depth += -1 if part == ".." else (0 if part in ("", ".") else 1)
            if depth < 0:
                raise FileOpError(
                    INVALID_ARGUMENTS, f"archive member {name!r}: link points outside the root"
                )
    if member.islnk():
        if _clean(member.linkname) not in names:
            raise FileOpError(
                INVALID_ARGUMENTS,
                f"archive member {name!r}: hard link to something not earlier in the archive",
            )
    return clean


def _rmtree(dir_fd: int, name: str) -> None:
    """Remove `name` below `dir_fd` and all it holds, never following a link.

    With a stack of its own: a tree (an archive's member 2,000 levels deep)
    may be deeper than Python's recursion limit.
    """
    # (parent's fd, name, the directory's fd, its entries not yet removed)
    stack: list[tuple[int, str, int, list[str]]] = []

    def enter(parent: int, entry: str) -> None:
        if not stat.S_ISDIR(os.lstat(entry, dir_fd=parent).st_mode):
            os.unlink(entry, dir_fd=parent)
            return
        fd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
        try:
            children = os.listdir(fd)
        except OSError:
            os.close(fd)
            raise
        stack.append((parent, entry, fd, children))

    try:
        with contextlib.suppress(OSError):
            enter(dir_fd, name)
        while stack:
            parent, entry, fd, children = stack[-1]
            if children:
                with contextlib.suppress(OSError):
                    enter(fd, children.pop())
                continue
            stack.pop()
            os.close(fd)
            with contextlib.suppress(OSError):
                os.rmdir(entry, dir_fd=parent)
    finally:
        for _, _, fd, _ in stack:
            os.close(fd)


def _stage_member(tar: tarfile.TarFile, member: tarfile.TarInfo, clean: str, root: str) -> None:
    """Write one member below `root` (the staging directory), never following
    links. A hard link becomes a copy of the staged file it names."""
    parent, name = open_parent(root + "/" + clean, create=True)
    try:
        if member.isdir():
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=parent)
            return
        # A name given again replaces what the archive put there before.
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(name, dir_fd=parent)
            if stat.S_ISDIR(st.st_mode):
                _rmtree(parent, name)
            else:
                os.unlink(name, dir_fd=parent)
        if member.issym():
            os.symlink(member.linkname, name, dir_fd=parent)
            return
        if member.islnk():
            source_parent, source_name = open_parent(root + "/" + _clean(member.linkname))
            try:
                fd = os.open(source_name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=source_parent)
            finally:
                os.close(source_parent)
            data: Any = os.fdopen(fd, "rb")
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
        else:
            data = tar.extractfile(member)
            mode = stat.S_IMODE(member.mode) & 0o777 | 0o600
        with contextlib.ExitStack() as stack:
            if data is not None:
                stack.enter_context(data)
            out = stack.enter_context(
                os.fdopen(os.open(name, FILE_FLAGS, mode, dir_fd=parent), "wb")
            )
            while data is not None:
                budget.check("unpacking the archive")
                chunk = data.read(CHUNK)
                if not chunk:
                    break
                out.write(chunk)
    finally:
        os.close(parent)


class _Decompressed:
    """A compressed archive's bytes as they are read; data that does not
    decompress is a broken archive (tarfile.ReadError), like a bad header."""

    def __init__(self, source: Any) -> None:
        head = source.peek(6)
        self.file: Any = source
        if head.startswith(b"\x1f\x8b"):
            import gzip

            self.file = gzip.GzipFile(fileobj=source, mode="rb")
        elif head.startswith(b"BZh"):
            import bz2

            self.file = bz2.BZ2File(source)
        elif head.startswith(b"\xfd7zXZ\x00"):
            import lzma

            self.file = lzma.LZMAFile(source)

    def read(self, size: int = -1) -> bytes:
        try:
            data: bytes = self.file.read(size)
        except (FileOpError, budget.BudgetExceeded):
            raise
        except Exception as exc:  # noqa: BLE001 - each decompressor has errors of its own
            msg = f"cannot decompress it: {exc}"
            raise tarfile.ReadError(msg) from None
        return data


def _stage(source: Any, staging: str, dest: str, keep_links: bool) -> tuple[list[Staged], int]:
    """Read the archive from `source` into `staging` member by member as they
    arrive; (what was staged, the bytes its files hold)."""
    staged: list[Staged] = []
    # Regular files staged so far, with their sizes: what a hard link may copy.
    files: dict[str, int] = {}
    total = 0
    # The free space is checked against the running total at every header:
    # a compressed bomb is refused at the one that overflows it.
    room = _free_bytes(dest)
    try:
        # A file for tarfile's stream mode, which only ever reads it.
        stream: Any = _Decompressed(source)
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                budget.check("reading the archive")
                # tarfile remembers every member; this pass needs none of them.
                tar.members.clear()  # type: ignore[attr-defined]
                if len(staged) >= MAX_MEMBERS:
                    msg = f"the archive has more than {MAX_MEMBERS} entries"
                    raise FileOpError(LIMIT_EXCEEDED, msg)
                clean = _check_member(member, files, keep_links)
                size = member.size if member.isfile() else 0
                if member.islnk():
                    size = files[_clean(member.linkname)]
                total += size
                if room is not None and total > room:
                    msg = f"the archive holds more than the {room} bytes free in {dest}"
                    raise FileOpError(LIMIT_EXCEEDED, msg)
                if clean:
                    _stage_member(tar, member, clean, staging)
                kind = "dir" if member.isdir() else "symlink" if member.issym() else "file"
                if kind == "file":
                    files[clean] = size
                else:
                    files.pop(clean, None)
                staged.append(Staged(clean, kind, member.name))
    except (tarfile.TarError, EOFError) as exc:
        raise FileOpError(INVALID_ARGUMENTS, f"not a readable tar archive: {exc}") from None
    return staged, total


def _links_stay_inside(staging: str, dest: str, staged: list[Staged]) -> None:
    """Resolve every extracted symlink for real, twice: among the archive's
    own entries (chains of its links), then in the destination as it is,
    whose existing links the target may pass through. Neither may leave."""
    for entry in staged:
        if entry.kind != "symlink":
            continue
        real = os.path.realpath(staging + "/" + entry.clean)
        inside = _within(real, staging)
        if inside is not None:
            real = os.path.realpath(dest + "/" + inside if inside else dest)
            inside = _within(real, dest)
        if inside is None:
            raise FileOpError(
                INVALID_ARGUMENTS,
                f"archive member {entry.name!r}: link points outside the root ({real})",
            )


def _within(path: str, root: str) -> str | None:
    """`path` relative to `root` ("" for root itself), None when outside it."""
    if path == root:
        return ""
    if path.startswith(root + "/"):
        return path[len(root) + 1 :]
    return None


def _move_into_place(staging: str, dest: str, staged: list[Staged]) -> None:
    # A name may occur more than once in an archive: the last one wins.
    staged = list({entry.clean: entry for entry in staged}.values())
    # Type conflicts are found before anything moves, so a refusal changes nothing.
    wanted: dict[str, bool] = {}
    for entry in staged:
        parts = entry.clean.split("/") if entry.clean else []
        for i in range(1, len(parts)):
            wanted["/".join(parts[:i])] = True
        if parts:
            wanted[entry.clean] = entry.kind == "dir"
    for clean, is_dir in wanted.items():
        target = dest + "/" + clean
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode) != is_dir:
            raise FileOpError(
                INVALID_ARGUMENTS,
                f"{target} exists as a {_kind(st.st_mode)}; the archive has a "
                f"{'directory' if is_dir else 'file'} there",
            )
    for entry in staged:
        if not entry.clean or entry.kind == "dir":
            if entry.clean:
                os.close(open_dir(dest + "/" + entry.clean, create=True))
            continue
        src_parent, name = open_parent(staging + "/" + entry.clean)
        dst_parent, _ = open_parent(dest + "/" + entry.clean, create=True)
        try:
            os.rename(name, name, src_dir_fd=src_parent, dst_dir_fd=dst_parent)
        finally:
            os.close(src_parent)
            os.close(dst_parent)


def _first_missing(path: str) -> str:
    """The shortest prefix of `path` that does not exist ("" when all do)."""
    parts = _components(path)
    for end in range(1, len(parts) + 1):
        prefix = "/" + "/".join(parts[:end])
        if not os.path.lexists(prefix):
            return prefix
    return ""


def _free_bytes(path: str) -> int | None:
    """Free bytes of the filesystem `path` is (or will be) on; None if unknown."""
    while path:
        try:
            vfs = os.statvfs(path)
        except OSError:
            path = path.rsplit("/", 1)[0]
            continue
        return vfs.f_bavail * vfs.f_frsize
    return None


def _unpack(source: Any, dest: str, restore: bool) -> tuple[list[Staged], int]:
    # Stage in the destination's filesystem so the final renames are atomic.
    staging_name = f".toolrt-extract-{uuid.uuid4().hex}"
    staging = dest + "/" + staging_name
    parent = open_dir(dest)
    try:
        os.mkdir(staging_name, 0o700, dir_fd=parent)
        try:
            staged, total = _stage(source, staging, dest, keep_links=restore)
            if restore:
                # Everything is staged and checked: only now does the old go.
                # (`parent` is an O_PATH descriptor: list through a real one.)
                listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=parent)
                try:
                    names = os.listdir(listing)
                finally:
                    os.close(listing)
                for name in names:
                    if name != staging_name:
                        _rmtree(parent, name)
            else:
                _links_stay_inside(staging, dest, staged)
            _move_into_place(staging, dest, staged)
        finally:
            _rmtree(parent, staging_name)
    finally:
        os.close(parent)
    return staged, total


def extract(request: protocol.Extract, source: Any) -> protocol.Transferred:
    """Unpack the tar archive read from `source` (a file, possibly compressed)
    below `dest`: every member checked, all or nothing."""
    dest = request.dest.rstrip("/") or "/"
    created = _first_missing(dest)
    os.close(open_dir(dest, create=True))
    try:
        staged, total = _unpack(source, dest, request.restore)
    except BaseException:
        # All or nothing: directories made for the destination go too.
        if created:
            parent, name = open_parent(created)
            try:
                _rmtree(parent, name)
            finally:
                os.close(parent)
        raise
    files = sum(1 for entry in staged if entry.kind != "dir")
    return protocol.Transferred(files=files, bytes=total)
