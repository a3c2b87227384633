"""Files for programs: the `stat`, `read_path` and `write_path` operations
(the StatPath, ReadFile and WriteFile RPCs).

Unlike the model's file tools, these take any path in the sandbox: the
sandbox user's permissions are the wall (each runs as that user on a thread
of its own, file_ops.serve). Failures carry the reasons the RPCs' clients
see (protocol.FILE_NOT_FOUND, ...). A read is never cut: more than
max_bytes is FILE_TOO_LARGE; the session's secrets are redacted from
what it sends, as from a command's output. A write opens the path as the user, so a
read-only file refuses it, and an existing file keeps its inode, owner and
mode.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import stat
import time
from typing import TYPE_CHECKING, Callable, Iterator

from . import budget, file_ops, files, flow, protocol
from .files import FileOpError
from .ops import operation

if TYPE_CHECKING:
    from .loop import Agent

CHUNK = protocol.CHUNK_BYTES
REASONS = {
    errno.ENOENT: protocol.FILE_NOT_FOUND,
    errno.ELOOP: protocol.FILE_NOT_FOUND,
    errno.EACCES: protocol.PERMISSION_DENIED,
    errno.EPERM: protocol.PERMISSION_DENIED,
    errno.EROFS: protocol.PERMISSION_DENIED,
    errno.EISDIR: protocol.IS_A_DIRECTORY,
    errno.ENOTDIR: protocol.NOT_A_DIRECTORY,
    errno.ENOSPC: protocol.NO_SPACE,
    errno.EDQUOT: protocol.NO_SPACE,
    errno.EFBIG: protocol.FILE_TOO_LARGE,
    errno.EEXIST: protocol.FILE_EXISTS,
    errno.ENAMETOOLONG: protocol.INVALID_REQUEST,
    errno.ENXIO: protocol.INVALID_REQUEST,
}
IF_EXISTS = ("replace", "fail", "append")
# How long a read of a special file waits for it at a time.
WAIT_S = 0.05


@contextlib.contextmanager
def reasons(path: str) -> Iterator[None]:
    """OSErrors as failures with the reason a program's client sees."""
    try:
        yield
    except OSError as exc:
        # The thread runs as the user asked for: name it (its effective uid).
        uid = os.geteuid()
        who = "the sandbox user" if uid == protocol.SANDBOX_UID else f"uid {uid}"
        message = files.os_failure(exc, path).message.replace("the sandbox user", who)
        raise FileOpError(REASONS.get(exc.errno or 0, protocol.INTERNAL), message) from None


def path_type(mode: int) -> str:
    """A PathInfo's type: the file tools' kinds, with "directory" spelled out."""
    kind = files._kind(mode)
    return "directory" if kind == "dir" else kind


def stat_path(request: protocol.Stat) -> protocol.StatReply:
    path = request.path
    with reasons(path):
        try:
            found = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return protocol.StatReply(exists=False)
        target = os.readlink(path) if stat.S_ISLNK(found.st_mode) else ""
    return protocol.StatReply(
        exists=True,
        type=path_type(found.st_mode),
        size=found.st_size,
        mode=stat.S_IMODE(found.st_mode),
        mtime=found.st_mtime,
        link_target=target,
    )


def too_large(path: str, size: int, request: protocol.ReadPath) -> FileOpError:
    return FileOpError(
        protocol.FILE_TOO_LARGE,
        f"{files.shown(path)}: {size} bytes or more from offset {request.offset}; "
        f"max_bytes is {request.max_bytes}",
    )


def read_path(request: protocol.ReadPath, emit: Callable[[bytes], None]) -> protocol.Transferred:
    """Emit the file's bytes from offset; FILE_TOO_LARGE past max_bytes.

    A regular file's size is known before a byte is sent; a special file
    (a FIFO, a device, a /proc entry) is read as it comes, for at most
    wait_s, and refused as soon as it passes max_bytes.
    """
    path = request.path
    with reasons(path):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        with reasons(path):
            found = os.fstat(fd)
            if stat.S_ISDIR(found.st_mode):
                raise FileOpError(protocol.IS_A_DIRECTORY, f"{files.shown(path)}: is a directory")
            regular = stat.S_ISREG(found.st_mode) and found.st_size > 0
            if regular and found.st_size - request.offset > request.max_bytes:
                raise too_large(path, found.st_size - request.offset, request)
            return _stream(fd, path, request, emit, regular)
    finally:
        os.close(fd)


def _stream(
    fd: int,
    path: str,
    request: protocol.ReadPath,
    emit: Callable[[bytes], None],
    regular: bool,
) -> protocol.Transferred:
    sent, skip = 0, max(0, request.offset)
    if regular:
        os.lseek(fd, skip, os.SEEK_SET)
        skip = 0
    give_up = time.monotonic() + request.wait_s
    while True:
        budget.check("reading the file")
        # A special file is read once it has something to say: a FIFO none
        # has opened for writing yet is not readable (its read would say
        # end-of-file at once), one whose writer left is.
        if not regular and not _readable(fd):
            if time.monotonic() > give_up:
                msg = (
                    f"{files.shown(path)}: did not end within {request.wait_s:g} s "
                    "(a FIFO or device whose writer keeps it open, or that nothing writes?)"
                )
                raise FileOpError(protocol.TIMEOUT, msg)
            continue
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            time.sleep(WAIT_S)  # reached only where select cannot wait (gVisor)
            continue
        if not data:
            return protocol.Transferred(files=1, bytes=sent)
        if skip:
            dropped = min(skip, len(data))
            data, skip = data[dropped:], skip - dropped
        if sent + len(data) > request.max_bytes:
            raise too_large(path, sent + len(data), request)
        if data:
            emit(data)
            sent += len(data)
        if not regular and time.monotonic() > give_up:
            msg = f"{files.shown(path)}: did not end within {request.wait_s:g} s"
            raise FileOpError(protocol.TIMEOUT, msg)


def _readable(fd: int) -> bool:
    """Whether a special file has something to say (within WAIT_S)."""
    try:
        return bool(select.select([fd], [], [], WAIT_S)[0])
    except OSError:
        # gVisor refuses to wait on some files (EPERM): read and see.
        return True


def write_path(request: protocol.WritePath, source: flow.Inflow) -> protocol.Transferred:
    path = request.path
    if request.if_exists not in IF_EXISTS:
        msg = f"if_exists {request.if_exists[:40]!r}: expected one of {', '.join(IF_EXISTS)}"
        raise FileOpError(protocol.INVALID_REQUEST, msg)
    mode = request.mode & 0o777
    flags = os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC
    with reasons(path):
        if request.make_parents:
            parent = os.path.dirname(path) or "/"
            try:
                os.makedirs(parent, exist_ok=True)
            except FileExistsError:
                # Something that is not a directory is in the way.
                msg = f"{files.shown(parent)}: not a directory"
                raise FileOpError(protocol.NOT_A_DIRECTORY, msg) from None
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, mode)
            os.fchmod(fd, mode)  # as asked, whatever the agent's umask
        except FileExistsError:
            if request.if_exists == "fail":
                raise
            keep = os.O_APPEND if request.if_exists == "append" else os.O_TRUNC
            fd = os.open(path, flags | keep)
    written = 0
    try:
        with reasons(path):
            os.set_blocking(fd, True)
            while True:
                data = source.read()
                if not data:
                    return protocol.Transferred(files=1, bytes=written)
                view = memoryview(data)
                while view:
                    budget.check("writing the file")
                    n = os.write(fd, view)
                    view = view[n:]
                    written += n
    finally:
        os.close(fd)


@operation(protocol.Stat)
def op_stat(agent: Agent, rid: int, request: protocol.Stat, body: bytes) -> None:
    file_ops.serve(
        agent,
        rid,
        request.deadline_s,
        lambda: (stat_path(request), b""),
        user=request.user,
        capabilities=request.capabilities,
    )


@operation(protocol.ReadPath)
def op_read_path(agent: Agent, rid: int, request: protocol.ReadPath, body: bytes) -> None:
    def run(emit: Callable[[bytes], None]) -> protocol.Message:
        # The session's secrets are redacted, as in everything else it shows.
        redacted = agent.redactor.stream()

        def send(data: bytes) -> None:
            data = redacted.feed(data)
            if data:
                emit(data)

        reply = read_path(request, send)
        rest = redacted.flush()
        if rest:
            emit(rest)
        return reply

    file_ops.serve_outflow(agent, rid, request, run)


@operation(protocol.WritePath)
def op_write_path(agent: Agent, rid: int, request: protocol.WritePath, body: bytes) -> None:
    file_ops.serve_inflow(agent, rid, request, lambda inflow: write_path(request, inflow))
