"""Tar archives in and out of the sandbox, as the sandbox user.

Unpacking checks every member first (no absolute paths, no `..`, no
devices, FIFOs or setuid bits, symlinks and hard links only inside the
archive's root), writes into a staging directory in the destination's
filesystem without following any link, resolves every link it created for
real, and only then renames the entries into place: a refusal changes
nothing. Packing streams the archive out in chunks.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tarfile
import uuid

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


def _check_member(member: tarfile.TarInfo, names: set[str]) -> str:
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
    if member.issym():
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
        target = "/".join(p for p in member.linkname.split("/") if p not in ("", "."))
        if target not in names:
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


def _extract_into(
    tar: tarfile.TarFile, members: list[tuple[str, tarfile.TarInfo]], root: str
) -> None:
    """Write the members below `root` (a fresh directory), never following links."""
    files: dict[str, tarfile.TarInfo] = {}
    for clean, member in members:
        budget.check("unpacking the archive")
        if not clean:
            continue
        parent, name = open_parent(root + "/" + clean, create=True)
        try:
            if member.isdir():
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=parent)
                continue
            with contextlib.suppress(FileNotFoundError):
                st = os.lstat(name, dir_fd=parent)
                if stat.S_ISDIR(st.st_mode):
                    _rmtree(parent, name)
                else:
                    os.unlink(name, dir_fd=parent)
            if member.issym():
                os.symlink(member.linkname, name, dir_fd=parent)
                continue
            source = member
            if member.islnk():
                source = files[
                    "/".join(p for p in member.linkname.split("/") if p not in ("", "."))
                ]
            data = tar.extractfile(source)
            mode = stat.S_IMODE(source.mode) & 0o777 | 0o600
            fd = os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=parent
            )
            with os.fdopen(fd, "wb") as out:
                while data is not None:
                    budget.check("unpacking the archive")
                    chunk = data.read(CHUNK)
                    if not chunk:
                        break
                    out.write(chunk)
            files[clean] = source
        finally:
            os.close(parent)


def _links_stay_inside(staging: str, dest: str, members: list[tuple[str, tarfile.TarInfo]]) -> None:
    """Resolve every extracted symlink for real, twice: among the archive's
    own entries (chains of its links), then in the destination as it is,
    whose existing links the target may pass through. Neither may leave."""
    for clean, member in members:
        if not member.issym():
            continue
        real = os.path.realpath(staging + "/" + clean)
        inside = _within(real, staging)
        if inside is not None:
            real = os.path.realpath(dest + "/" + inside if inside else dest)
            inside = _within(real, dest)
        if inside is None:
            raise FileOpError(
                INVALID_ARGUMENTS,
                f"archive member {member.name!r}: link points outside the root ({real})",
            )


def _within(path: str, root: str) -> str | None:
    """`path` relative to `root` ("" for root itself), None when outside it."""
    if path == root:
        return ""
    if path.startswith(root + "/"):
        return path[len(root) + 1 :]
    return None


def _move_into_place(staging: str, dest: str, members: list[tuple[str, tarfile.TarInfo]]) -> None:
    # A name may occur more than once in an archive: the last one wins.
    members = list({clean: (clean, member) for clean, member in members}.values())
    # Type conflicts are found before anything moves, so a refusal changes nothing.
    wanted: dict[str, bool] = {}
    for clean, member in members:
        parts = clean.split("/") if clean else []
        for i in range(1, len(parts)):
            wanted["/".join(parts[:i])] = True
        if parts:
            wanted[clean] = member.isdir()
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
    for clean, member in members:
        if not clean or member.isdir():
            if clean:
                os.close(open_dir(dest + "/" + clean, create=True))
            continue
        src_parent, name = open_parent(staging + "/" + clean)
        dst_parent, _ = open_parent(dest + "/" + clean, create=True)
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


def _unpack(
    tar: tarfile.TarFile, members: list[tuple[str, tarfile.TarInfo]], dest: str, total: int
) -> None:
    vfs = os.statvfs(dest)
    free = vfs.f_bavail * vfs.f_frsize
    if total > free:
        raise FileOpError(
            LIMIT_EXCEEDED, f"the archive holds {total} bytes; {dest} has {free} bytes free"
        )
    # Stage in the destination's filesystem so the final renames are atomic.
    staging_name = f".toolrt-extract-{uuid.uuid4().hex}"
    staging = dest + "/" + staging_name
    parent = open_dir(dest)
    try:
        os.mkdir(staging_name, 0o700, dir_fd=parent)
        try:
            _extract_into(tar, members, staging)
            _links_stay_inside(staging, dest, members)
            _move_into_place(staging, dest, members)
        finally:
            _rmtree(parent, staging_name)
    finally:
        os.close(parent)


def extract(request: protocol.Extract, body: bytes) -> protocol.Transferred:
    """Unpack a tar archive below `dest`: every member checked, all or nothing."""
    dest = request.dest.rstrip("/") or "/"
    members: list[tuple[str, tarfile.TarInfo]] = []
    names: set[str] = set()
    total = 0
    # Members are read one header at a time and their sizes summed as they
    # come: a compressed bomb is refused at the header that overflows the
    # free space, not after decompressing all of it.
    room = _free_bytes(dest)
    try:
        tar = tarfile.open(fileobj=io.BytesIO(body), mode="r:*")
        for info in tar:
            budget.check("reading the archive")
            clean = _check_member(info, names)
            if info.isfile():
                names.add(clean)
                total += info.size
                if room is not None and total > room:
                    raise FileOpError(
                        LIMIT_EXCEEDED,
                        f"the archive holds more than the {room} bytes free in {dest}",
                    )
            members.append((clean, info))
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise FileOpError(INVALID_ARGUMENTS, f"not a readable tar archive: {exc}") from None
    created = _first_missing(dest)
    os.close(open_dir(dest, create=True))
    try:
        _unpack(tar, members, dest, total)
    except BaseException:
        # All or nothing: directories made for the destination go too.
        if created:
            parent, name = open_parent(created)
            try:
                _rmtree(parent, name)
            finally:
                os.close(parent)
        raise
    files = sum(1 for _, m in members if not m.isdir())
    return protocol.Transferred(files=files, bytes=total)
