"""Workspaces in and out of a session's sandbox, as tar archives.

Archives are unpacked and packed by the in-sandbox agent as the sandbox
user (`runtime/agent/files.py`): it refuses absolute paths, `..`, links
leaving the destination, device nodes and setuid bits, and stages the
archive so a refusal changes nothing. These are operator RPCs, not model
tools: failures end the RPC (INVALID_ARGUMENT) rather than becoming a
ToolResult.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from runtime.agent import protocol
from runtime.errors import BadRequest, ToolFailure
from runtime.policy.allowlist import is_within, normalize
from runtime.sandbox.backend import EventSink
from runtime.sessions.session import Session

# The archive travels to the agent as one frame.
MAX_UPLOAD_BYTES = protocol.MAX_BODY - (1 << 20)
# Where a sandbox keeps anything worth moving: its writable filesystems (and
# not, say, /proc, whose files never end).
TRANSFER_AREAS = ("/workspace", "/tmp")


async def _agent(
    session: Session,
    op: str,
    header: dict[str, Any],
    body: bytes = b"",
    on_event: EventSink | None = None,
) -> dict[str, Any]:
    try:
        reply, _ = await session.sandbox.request(op, header, body, on_event)
    except ToolFailure as exc:
        msg = f"session {session.id}: {exc.message}"
        raise BadRequest(msg) from exc
    if reply.get("op") == "error":
        msg = f"{reply.get('code')}: {reply.get('message')}"
        raise BadRequest(msg)
    return reply


def _absolute(path: str, what: str) -> str:
    if not path.startswith("/") or "\x00" in path:
        msg = f"{what} {path[:200]!r}: expected an absolute path in the sandbox, e.g. /workspace"
        raise BadRequest(msg)
    return normalize(path)


async def _resolved(session: Session, paths: list[str], what: str) -> list[str]:
    """The sandbox's resolution of each path, which must lie in a transfer area."""
    reply = await _agent(session, "resolve", {"paths": [_absolute(p, what) for p in paths]})
    resolved = [str(item["path"]) for item in reply["resolved"]]
    for asked, real in zip(paths, resolved, strict=True):
        if not any(is_within(real, area) for area in TRANSFER_AREAS):
            msg = f"{what} {asked[:200]!r} resolves to {real}: only {', '.join(TRANSFER_AREAS)}"
            raise BadRequest(msg)
    return resolved


async def upload_tar(session: Session, dest: str, data: bytes) -> tuple[int, int]:
    """Unpack a tar archive below `dest`; (files, bytes) unpacked."""
    if len(data) > MAX_UPLOAD_BYTES:
        msg = f"the archive is {len(data)} bytes; at most {MAX_UPLOAD_BYTES} per upload"
        raise BadRequest(msg)
    async with session.write_lock:
        [resolved] = await _resolved(session, [dest or "/workspace"], "destination")
        reply = await _agent(session, "extract", {"dest": resolved}, data)
    return int(reply["files"]), int(reply["bytes"])


async def download_tar(session: Session, paths: list[str]) -> AsyncIterator[bytes]:
    """A tar archive of `paths` (each under its base name), in chunks."""
    if not paths:
        msg = "no paths to download; name at least one, e.g. /workspace"
        raise BadRequest(msg)
    wanted = await _resolved(session, paths, "path")
    chunks: asyncio.Queue[bytes] = asyncio.Queue()

    def on_event(frame: dict[str, Any], chunk: bytes) -> None:
        if frame.get("op") == "data":
            chunks.put_nowait(chunk)

    header = {"paths": wanted, "max_bytes": session.limits.workspace_bytes * 2 + (16 << 20)}
    task = asyncio.ensure_future(_agent(session, "archive", header, on_event=on_event))
    try:
        while not task.done() or not chunks.empty():
            getter = asyncio.ensure_future(chunks.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield getter.result()
            else:
                getter.cancel()
        task.result()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
