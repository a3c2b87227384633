"""File operations of the in-sandbox agent, done as the sandbox user.

The agent is root without DAC_OVERRIDE; every operation here switches the
effective uid/gid of the thread it runs on to the sandbox user's (per
operation, per thread: see as_sandbox_user), so permissions and ownership
are exactly those of a command the user runs. Paths arrive already resolved
by the `resolve` op and checked by the daemon's allowlist (or, for a read,
resolved by the read op itself and checked before its reply is shown); they
are then opened by walking
from `/` one component at a time with O_NOFOLLOW, so a symlink swapped in
after the check makes the operation fail instead of being followed.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
from typing import Any, Iterator, List, Tuple

from . import budget, protocol, users
from .protocol import (
    INTERNAL,
    INVALID_ARGUMENTS,
    LIMIT_EXCEEDED,
    NAME_MAX,
    NOT_FOUND,
    PATH_DENIED,
    PATH_MAX,
)

DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
CHUNK = 1 << 20
# A read's line window reads in smaller pieces: a buffer above malloc's
# mmap threshold (128 KiB at first) is mapped and zero-filled afresh each
# time (about 260 page faults per MiB, more CPU than the read itself); one
# below it is reused from the heap.
WINDOW_CHUNK = 64 << 10
_libc: Any = None  # loaded at the first file op (ctypes costs every start-up)
# setgroups, setresuid, setresgid by architecture.
CREDENTIAL_SYSCALLS = {"x86_64": (116, 117, 119), "aarch64": (159, 147, 149)}


class FileOpError(Exception):
    """A failure with an agent error code (NOT_FOUND, PATH_DENIED, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@contextlib.contextmanager
def as_sandbox_user() -> Iterator[None]:
    """Filesystem access as the sandbox user (see as_user)."""
    with as_user(users.SANDBOX):
        yield


@contextlib.contextmanager
def as_user(who: users.Who) -> Iterator[None]:
    """Filesystem access as `who`, for the calling thread, for the duration
    of the block.

    The thread's effective ids become the user's while its real and saved
    ids stay root's, so it can come back (and, its effective capabilities
    gone meanwhile, gets them back). As root, the thread's effective
    capabilities become root's in this session (users.py) until the block
    ends. Not setfsuid/setfsgid: gVisor does not implement them. Raw
    syscalls, not libc's wrappers: those change every thread of the
    process, and abort it when one thread cannot follow (one running a file
    op as the sandbox user cannot).
    """
    import ctypes  # loaded at the first file op (it costs every start-up)

    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    numbers = CREDENTIAL_SYSCALLS.get(os.uname().machine)
    if numbers is None:
        raise FileOpError(INTERNAL, f"no file operations on {os.uname().machine!r}")
    setgroups, setresuid, setresgid = numbers
    keep = ctypes.c_long(-1)
    switched = (
        _libc.syscall(setgroups, 0, None) == 0
        and _libc.syscall(setresgid, keep, who.gid, keep) == 0
        and _libc.syscall(setresuid, keep, who.uid, keep) == 0
    )
    restore = -1
    try:
        if not switched:
            reason = os.strerror(ctypes.get_errno())
            raise FileOpError(INTERNAL, f"cannot switch to uid {who.uid}: {reason}")
        if who.uid == 0:
            try:
                restore = users.set_effective(who.capabilities)
            except OSError as exc:
                raise FileOpError(INTERNAL, f"cannot set root's capabilities: {exc}") from None
        yield
    finally:
        if restore >= 0:
            users.set_effective(restore)
        # Going back to the saved ids is always allowed.
        _libc.syscall(setresuid, keep, 0, keep)
        _libc.syscall(setresgid, keep, 0, keep)


def _code_of(exc: OSError) -> str:
    if exc.errno in (errno.ENOENT,):
        return "NOT_FOUND"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.ENOMEM):
        return "LIMIT_EXCEEDED"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ELOOP):
        return "PATH_DENIED"
    if exc.errno in (errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY, errno.EEXIST):
        return "INVALID_ARGUMENTS"
    if exc.errno == errno.ENAMETOOLONG:
        # A name over the kernel's limits is one the caller chose: theirs to shorten.
        return "INVALID_ARGUMENTS"
    return "INTERNAL"


def os_failure(exc: OSError, path: str) -> FileOpError:
    reason = {
        errno.ENOENT: "no such file or directory",
        errno.EACCES: "permission denied for the sandbox user",
        errno.EPERM: "operation not permitted for the sandbox user",
        errno.EROFS: "read-only filesystem (only /workspace and /tmp are writable)",
        errno.ENOSPC: "no space left (the workspace size limit is reached)",
        errno.EFBIG: "file too large",
        errno.EISDIR: "is a directory",
        errno.ENOTDIR: "not a directory",
        errno.ELOOP: "a symbolic link appeared in the path after it was checked",
        errno.ENAMETOOLONG: (
            f"name too long (at most {NAME_MAX} bytes per file name, {PATH_MAX - 1} per path)"
        ),
    }.get(exc.errno or 0, exc.strerror or str(exc))
    return FileOpError(_code_of(exc), f"{shown(path)}: {reason}")


def shown(path: Any) -> str:
    """`path` for a message, a very long one by its ends (an OSError's
    `filename` may also be a file descriptor)."""
    text = str(path)
    return text if len(text) <= 300 else f"{text[:200]}...{text[-80:]}"


def _components(path: str) -> list[str]:
    if not path.startswith("/") or "\x00" in path:
        raise FileOpError(INVALID_ARGUMENTS, f"{path!r}: expected an absolute path")
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise FileOpError(PATH_DENIED, f"{path}: expected a resolved path")
    return parts


def _step(fd: int, name: str, path: str, create: bool) -> int:
    """Open directory `name` below `fd` without following a symlink."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=fd)
    return os.open(name, DIR_FLAGS, dir_fd=fd)


def _explain_walk_error(exc: OSError, fd: int, name: str, path: str) -> FileOpError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        try:
            st = os.lstat(name, dir_fd=fd)
        except OSError:
            return os_failure(exc, path)
        if stat.S_ISLNK(st.st_mode):
            return FileOpError(
                PATH_DENIED,
                f"{path}: a symbolic link appeared in the path after it was checked",
            )
        return FileOpError(NOT_FOUND, f"{path}: {name!r} is not a directory")
    return os_failure(exc, path)


def open_dir(path: str, create: bool = False) -> int:
    """An O_PATH fd of directory `path`, walked from / without following links."""
    fd = os.open("/", DIR_FLAGS)
    try:
        for name in _components(path):
            try:
                nxt = _step(fd, name, path, create)
            except OSError as exc:
                raise _explain_walk_error(exc, fd, name, path) from None
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_parent(path: str, create: bool = False) -> tuple[int, str]:
    """(fd of the parent directory, final name) of a resolved path."""
    parts = _components(path)
    if not parts:
        raise FileOpError(INVALID_ARGUMENTS, "/: expected a file path, not the root")
    return open_dir("/" + "/".join(parts[:-1]), create), parts[-1]


def open_file(path: str, flags: int = os.O_RDONLY) -> int:
    parent, name = open_parent(path)
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except OSError as exc:
        raise _explain_walk_error(exc, parent, name, path) from None
    finally:
        os.close(parent)


# -- ops --------------------------------------------------------------------
def resolve(request: protocol.Resolve, body: bytes) -> Tuple[protocol.Resolved, bytes]:
    """Resolve each path as the kernel would (symlinks, `..`, /proc tricks)."""
    resolved = []
    for path in request.paths:
        real = os.path.realpath(path)
        try:
            st = os.lstat(real)
            kind = _kind(st.st_mode)
        except OSError:
            kind = ""
        resolved.append(protocol.ResolvedPath(path=real, type=kind))
    return protocol.Resolved(resolved=resolved), b""


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def read(request: protocol.Read, body: bytes) -> Tuple[protocol.ReadReply, bytes]:
    """Lines [offset, offset+limit) of a file, at most max_bytes of them.

    With `raw`, the whole file (LIMIT_EXCEEDED past max_bytes).
    """
    path = request.path
    max_bytes = request.max_bytes
    # Non-blocking so that a FIFO cannot stall the agent's single thread;
    # anything but a regular file is refused below before it is read.
    fd = open_file(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISDIR(st.st_mode):
            raise FileOpError(INVALID_ARGUMENTS, f"{path}: is a directory; use list_files")
        if not stat.S_ISREG(st.st_mode):
            raise FileOpError(INVALID_ARGUMENTS, f"{path}: not a regular file")
        if request.raw:
            data = f.read(max_bytes + 1)
            if len(data) > max_bytes:
                raise FileOpError(LIMIT_EXCEEDED, f"{path}: larger than the {max_bytes}-byte limit")
            return protocol.ReadReply(size=st.st_size, links=st.st_nlink), data
        binary = b"\x00" in f.read(8192)
        if binary:
            return protocol.ReadReply(size=st.st_size, links=st.st_nlink, binary=True), b""
        f.seek(0)
        total, truncated, kept = _line_window(f, request.offset, request.limit, max_bytes)
    reply = protocol.ReadReply(
        size=st.st_size, links=st.st_nlink, total_lines=total, truncated=truncated
    )
    return reply, bytes(kept)


def _line_window(f: Any, first: int, limit: int, max_bytes: int) -> tuple[int, bool, bytes]:
    """Lines [first, first + limit) of `f` (1-based), the file's line count,
    and whether anything was left out.

    Reads in bounded chunks (one huge line is never held whole) and counts
    lines with bytes.count, not a Python loop per line: a 1 MiB file of
    short lines costs about a millisecond.
    """
    end = first + limit
    kept = bytearray()
    line = 1  # the line the next byte read belongs to
    newlines = 0
    truncated = False
    last = b""
    while True:
        budget.check("reading the file")
        chunk = f.read(WINDOW_CHUNK)
        if not chunk:
            break
        last = chunk
        count = chunk.count(b"\n")
        top = line + count  # the line of the byte after this chunk
        if line < end and top >= first:
            start = 0 if first <= line else _after_newline(chunk, first - line)
            stop = len(chunk) if end > top else _after_newline(chunk, end - line)
            truncated = truncated or stop < len(chunk)
            piece = chunk[start:stop]
            room = max_bytes - len(kept)
            if len(piece) > room:
                piece = piece[: max(0, room)]
                truncated = True
            kept += piece
        elif line >= end:
            truncated = True
        line = top
        newlines += count
    total = newlines + (1 if last and not last.endswith(b"\n") else 0)
    return total, truncated, bytes(kept)


def _after_newline(chunk: bytes, nth: int) -> int:
    """Offset just after the nth newline of `chunk` (which has at least nth)."""
    # One split in C, not nth searches from Python (2000 of them by default).
    return len(chunk) - len(chunk.split(b"\n", nth)[nth])


def _write_atomic(parent: int, name: str, data: bytes, path: str) -> None:
    # Cut in bytes, not characters: 64 four-byte characters would make the
    # temporary name longer than the final one and than NAME_MAX.
    tmp = f".{os.fsdecode(os.fsencode(name)[:64])}.toolrt-{os.urandom(6).hex()}.tmp"
    mode = 0o644
    with contextlib.suppress(OSError):
        st = os.lstat(name, dir_fd=parent)
        if stat.S_ISDIR(st.st_mode):
            raise FileOpError(INVALID_ARGUMENTS, f"{path}: is a directory")
        if stat.S_ISREG(st.st_mode):
            mode = stat.S_IMODE(st.st_mode)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=parent)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=parent)
        raise


def write(request: protocol.Write, body: bytes) -> Tuple[protocol.WriteReply, bytes]:
    """Replace a file atomically (temp file + rename), creating parent dirs."""
    path = request.path
    parent, name = open_parent(path, create=True)
    try:
        _write_atomic(parent, name, body, path)
    finally:
        os.close(parent)
    return protocol.WriteReply(bytes_written=len(body)), b""


def unlink(request: protocol.Unlink, body: bytes) -> Tuple[protocol.Done, bytes]:
    parent, name = open_parent(request.path)
    try:
        os.unlink(name, dir_fd=parent)
    except FileNotFoundError:
        pass
    finally:
        os.close(parent)
    return protocol.Done(), b""


def list_dir(request: protocol.ListDir, body: bytes) -> Tuple[protocol.Listing, bytes]:
    """Entries below a directory, symlinks listed but never followed."""
    top = request.path.rstrip("/") or "/"
    cap = request.max_entries
    recursive = request.recursive
    dfd = open_dir(top)
    entries: List[protocol.DirEntry] = []
    truncated = False
    try:
        rfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dfd)
    finally:
        os.close(dfd)
    try:
        for dirpath, dirnames, filenames, walk_fd in os.fwalk(
            ".", dir_fd=rfd, follow_symlinks=False
        ):
            dirnames.sort()
            budget.check("listing the directory")
            base = posixpath.normpath(posixpath.join(top, dirpath))
            for name in sorted(dirnames + filenames):
                if len(entries) >= cap:
                    truncated = True
                    break
                try:
                    st = os.lstat(name, dir_fd=walk_fd)
                except OSError:
                    continue
                kind = _kind(st.st_mode)
                entries.append(
                    protocol.DirEntry(
                        path=posixpath.join(base, name),
                        type=kind,
                        size=st.st_size if kind == "file" else 0,
                    )
                )
            if truncated or not recursive:
                break
    except RecursionError:
        # os.fwalk recurses once per level (before Python 3.13): a tree
        # deeper than the interpreter's stack is listed as far as it got.
        truncated = True
    finally:
        os.close(rfd)
    return protocol.Listing(entries=entries, truncated=truncated), b""
