"""Tar archives out of the sandbox (downloads, snapshots, diffs), as the sandbox user.

Every path is opened by walking from `/` with O_NOFOLLOW (files.open_parent)
and everything below it through directory descriptors (os.fwalk without
following links), so a directory renamed or swapped for a symlink while the
archive is written is never followed out of the tree that was asked for.
Symlinks are stored as links; sockets, FIFOs and devices are left out.

Text files (regular files whose content is valid UTF-8) have the session's
secrets redacted: one of at most REDACT_MAX_BYTES is read whole and stored
with the size of its redacted content, so every tar header is true; a larger
one that holds a secret is refused (its header would have to be written
before its content is known). Other files travel as they are. A snapshot
asks for no redaction: the daemon refuses one holding a secret rather than
store rewritten files.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import codecs
import io
import os
import posixpath
import stat
import tarfile
from typing import Any, Callable, Optional

from . import budget, protocol
from .files import FileOpError, open_parent, os_failure
from .protocol import CHUNK_BYTES, LIMIT_EXCEEDED
from .redact import Redactor

# Text files up to this size are redacted in memory.
REDACT_MAX_BYTES = 8 << 20

OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _ChunkWriter(io.RawIOBase):
    """A write-only file that hands out CHUNK_BYTES-sized pieces as they fill
    (`emit` waits while the daemon has no room for another)."""

    def __init__(self, emit: Callable[[bytes], None], cap: int) -> None:
        self.buf = bytearray()
        self.emit = emit
        self.total = 0
        self.cap = cap

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        size = len(data)
        self.total += size
        if self.total > self.cap:
            raise FileOpError(LIMIT_EXCEEDED, f"the archive exceeds {self.cap} bytes")
        self.buf += data
        while len(self.buf) >= CHUNK_BYTES:
            self.emit(bytes(self.buf[:CHUNK_BYTES]))
            del self.buf[:CHUNK_BYTES]
        return size

    def flush_all(self) -> None:
        if self.buf:
            self.emit(bytes(self.buf))
            self.buf.clear()


class _Checked:
    """A file whose reads stop when the operation's budget is spent."""

    def __init__(self, f: Any) -> None:
        self.f = f

    def read(self, size: int = -1) -> bytes:
        budget.check("packing the archive")
        data: bytes = self.f.read(size)
        return data


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _holds_secret_as_text(f: Any, redactor: Redactor) -> bool:
    """Whether a file read to its end is valid UTF-8 and holds a secret."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    tail, found = b"", False
    while True:
        data = f.read(CHUNK_BYTES)
        try:
            decoder.decode(data, final=not data)
        except UnicodeDecodeError:
            return False
        if not data:
            return found
        found = found or redactor.found(tail + data)
        tail = (tail + data)[-redactor.longest :]


class _Packer:
    def __init__(self, tar: tarfile.TarFile, redactor: Redactor) -> None:
        self.tar = tar
        self.redactor = redactor
        self.count = 0

    def add(self, dir_fd: int, name: str, arcname: str, path: str) -> Optional[os.stat_result]:
        """Add entry `name` of `dir_fd`; its stat when it is a directory to descend."""
        budget.check("packing the archive")
        st = os.lstat(name, dir_fd=dir_fd)
        info = tarfile.TarInfo(arcname)
        info.mode = stat.S_IMODE(st.st_mode)
        info.uid, info.gid, info.mtime = st.st_uid, st.st_gid, int(st.st_mtime)
        if stat.S_ISDIR(st.st_mode):
            info.type = tarfile.DIRTYPE
            self._add(info)
            return st
        if stat.S_ISLNK(st.st_mode):
            info.type = tarfile.SYMTYPE
            info.linkname = os.readlink(name, dir_fd=dir_fd)
            self._add(info)
        elif stat.S_ISREG(st.st_mode):
            fd = os.open(name, OPEN_FILE, dir_fd=dir_fd)
            with os.fdopen(fd, "rb") as f:
                now = os.fstat(fd)
                if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (
                    st.st_dev,
                    st.st_ino,
                ):
                    raise FileOpError(
                        protocol.PATH_DENIED, f"{path}: replaced while it was being archived"
                    )
                info.size = now.st_size
                self._add_file(info, _Checked(f), path)
        return None

    def _add_file(self, info: tarfile.TarInfo, f: _Checked, path: str) -> None:
        if self.redactor.regex is None:
            self._add(info, f)
            return
        data = f.read(REDACT_MAX_BYTES + 1)
        if len(data) <= REDACT_MAX_BYTES:
            if _is_text(data):
                data = self.redactor.redact(data)
            info.size = len(data)
            self._add(info, io.BytesIO(data))
            return
        f.f.seek(0)
        if _holds_secret_as_text(f, self.redactor):
            raise FileOpError(
                LIMIT_EXCEEDED,
                f"{path}: a text file over {REDACT_MAX_BYTES} bytes that holds a secret "
                "of the session; it is too large to redact in a download",
            )
        f.f.seek(0)
        self._add(info, f)

    def _add(self, info: tarfile.TarInfo, fileobj: Any = None) -> None:
        self.tar.addfile(info, fileobj)
        self.count += 1

    def tree(self, path: str) -> None:
        parent, name = open_parent(path)
        try:
            arcname = posixpath.basename(path.rstrip("/")) or "."
            top = self.add(parent, name, arcname, path)
            if top is None:
                return
            dfd = os.open(name, OPEN_DIR, dir_fd=parent)
        finally:
            os.close(parent)
        try:
            if (os.fstat(dfd).st_dev, os.fstat(dfd).st_ino) != (top.st_dev, top.st_ino):
                raise FileOpError(
                    protocol.PATH_DENIED, f"{path}: replaced while it was being archived"
                )
            self._below(dfd, arcname, path)
        finally:
            os.close(dfd)

    def _below(self, dfd: int, arcname: str, path: str) -> None:
        def fail(exc: OSError) -> None:
            raise os_failure(exc, getattr(exc, "filename", None) or path)

        for dirpath, dirnames, filenames, walk_fd in os.fwalk(
            ".", dir_fd=dfd, follow_symlinks=False, onerror=fail
        ):
            dirnames.sort()
            for entry in sorted(dirnames + filenames):
                rel = posixpath.normpath(posixpath.join(dirpath, entry))
                self.add(walk_fd, entry, f"{arcname}/{rel}", f"{path}/{rel}")


def archive(
    request: protocol.Archive, emit: Callable[[bytes], None], redactor: Redactor
) -> protocol.Transferred:
    """Tar the given (resolved) paths, streamed in chunks, secrets redacted."""
    writer = _ChunkWriter(emit, request.max_bytes)
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        packer = _Packer(tar, redactor)
        for path in request.paths:
            packer.tree(path)
    writer.flush_all()
    return protocol.Transferred(files=packer.count, bytes=writer.total)
