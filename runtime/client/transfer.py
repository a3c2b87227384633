"""`toolrt cp`: local files ↔ a session's sandbox, as tar archives.

`cp LOCAL SESSION:PATH` makes PATH a copy of LOCAL (a directory's contents
land in PATH; a PATH ending in `/` receives LOCAL under its own name).
`cp SESSION:PATH LOCAL` is the reverse. What comes out of a sandbox is
untrusted: it is unpacked with tarfile's `data` filter (no absolute paths,
no `..`, no links leaving the destination, no devices, no setuid bits).
"""

from __future__ import annotations

import io
import os
import posixpath
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from runtime.constants import WORKSPACE

_REMOTE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*):(.*)$")


@dataclass(frozen=True)
class Remote:
    session_id: str
    path: str


def parse_location(text: str) -> Remote | str:
    """SESSION:PATH (relative PATHs are below /workspace), else a local path.

    Local paths that contain ':' can be written as ./name:with:colons.
    """
    match = _REMOTE.match(text)
    if match is None:
        return text
    path = match.group(2) or WORKSPACE
    return Remote(match.group(1), posixpath.normpath(posixpath.join(WORKSPACE, path)))


def pack_for_upload(local: str | Path, remote_path: str) -> tuple[bytes, str]:
    """(tar archive, sandbox directory to unpack it into) for `cp LOCAL SESSION:PATH`."""
    source = Path(local)
    if not source.exists():
        msg = f"{local}: no such file or directory"
        raise FileNotFoundError(msg)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if source.is_dir():
            for child in sorted(source.iterdir()):
                tar.add(child, arcname=child.name)
            dest = remote_path
        elif remote_path.endswith("/"):
            tar.add(source, arcname=source.name)
            dest = remote_path
        else:
            tar.add(source, arcname=posixpath.basename(remote_path))
            dest = posixpath.dirname(remote_path) or "/"
    return buffer.getvalue(), dest


def unpack_download(data: bytes, local: str | Path) -> list[str]:
    """Unpack a DownloadFiles archive of one path so that LOCAL becomes that path."""
    if not hasattr(tarfile, "data_filter"):
        msg = "unpacking safely needs Python >= 3.11.4 (tarfile's data filter)"
        raise RuntimeError(msg)
    dest = Path(local)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        members = tar.getmembers()
        if not members:
            return []
        top = members[0]
        if top.isdir():
            dest.mkdir(parents=True, exist_ok=True)
            prefix = top.name.rstrip("/") + "/"
            picked = []
            for member in members[1:]:
                if member.name.startswith(prefix):
                    member.name = member.name[len(prefix) :]
                    picked.append(member)
            tar.extractall(dest, members=picked, filter="data")
            return [str(dest / m.name) for m in picked]
        if dest.is_dir():
            target = dest / posixpath.basename(top.name)
        else:
            target = dest
            dest.parent.mkdir(parents=True, exist_ok=True)
        top.name = target.name
        tar.extractall(target.parent, members=[top], filter="data")
        return [os.fspath(target)]
