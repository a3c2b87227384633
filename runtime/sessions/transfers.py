"""Uploads and downloads through a session: workspaces in and out as tar archives.

Archives are unpacked and packed by the in-sandbox agent as the sandbox
user (`static-agent/extract.go`, `pack.go`): it refuses absolute paths,
`..`, links leaving the destination, device nodes and setuid bits, and
stages the archive so a refusal changes nothing. These are operator RPCs,
not model tools: failures end the RPC (INVALID_ARGUMENT) rather than
becoming a ToolResult.

Archives stream through the daemon under flow control (the agent protocol's
chunks and credits): an upload's session is looked up before anything past
its first message is read, and each transfer holds a window of chunks at a
time, whatever the archive's size or the client's speed. Each transfer
holds a slot (`slots.py`): a bounded number daemon-wide, a share of them per
tenant, lost by a transfer whose client stalls; so the daemon's memory for
transfers is bounded in total too, and one tenant cannot hold every slot.

A transfer is session activity like a call: the idle reaper leaves the
session alone while one runs. A transfer that finds the sandbox gone closes
the session and ends with FAILED_PRECONDITION saying SANDBOX_LOST.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterator
from typing import Protocol

from runtime.constants import WORKSPACE, WRITABLE_AREAS
from runtime.errors import BadRequest, SessionUnusable, ToolFailure
from runtime.policy.allowlist import is_within, normalize
from runtime.sessions.session import Session
from runtime.sessions.slots import TransferSlots

# Where a sandbox keeps anything worth moving: its writable filesystems (and
# not, say, /proc, whose files never end).
TRANSFER_AREAS = WRITABLE_AREAS


class SessionManager(Protocol):
    """What transfers need of the session manager (which seeds a new
    session's workspace with `upload_tar`, so it is not imported here)."""

    async def lookup(self, tenant: str, session_id: str) -> Session: ...

    async def lose(self, session: Session, reason: str) -> None: ...


@contextlib.contextmanager
def as_request_errors(session: Session) -> Iterator[None]:
    """Transfers (and snapshots) are operator RPCs: a failure ends the RPC,
    not a ToolResult."""
    try:
        yield
    except ToolFailure as exc:
        # The agent's message may name a path whose name holds a secret.
        message = session.redactor.redact_text(exc.message)
        msg = f"session {session.id}: {exc.code}: {message}"
        raise BadRequest(msg) from exc


def _absolute(path: str, what: str) -> str:
    if not path.startswith("/") or "\x00" in path:
        msg = f"{what} {path[:200]!r}: expected an absolute path in the sandbox, e.g. /workspace"
        raise BadRequest(msg)
    return normalize(path)


async def _resolved(session: Session, paths: list[str], what: str) -> list[str]:
    """The sandbox's resolution of each path, which must lie in a transfer area."""
    with as_request_errors(session):
        items = await session.sandbox.agent.resolve([_absolute(p, what) for p in paths])
    resolved = [item.path for item in items]
    for asked, real in zip(paths, resolved, strict=True):
        if not any(is_within(real, area) for area in TRANSFER_AREAS):
            msg = f"{what} {asked[:200]!r} resolves to {real}: only {', '.join(TRANSFER_AREAS)}"
            raise BadRequest(msg)
    return resolved


async def _one(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def upload_tar(
    session: Session, dest: str, archive: bytes | AsyncIterable[bytes]
) -> tuple[int, int]:
    """Unpack a tar archive (its bytes, or its chunks as they come) below
    `dest`; (files, bytes) unpacked.

    On the session as it is: `Transfers.upload` is the RPC's way in; this is
    also how CreateSession seeds a new session's workspace.
    """
    chunks = _one(archive) if isinstance(archive, bytes) else archive
    async with session.write_lock:
        [resolved] = await _resolved(session, [dest or WORKSPACE], "destination")
        with as_request_errors(session):
            reply = await session.sandbox.agent.extract(resolved, chunks)
    return reply.files, reply.bytes


async def download_tar(session: Session, paths: list[str]) -> AsyncGenerator[bytes, None]:
    """A tar archive of `paths` (each under its base name), in chunks as the
    caller takes them."""
    if not paths:
        msg = "no paths to download; name at least one, e.g. /workspace"
        raise BadRequest(msg)
    wanted = await _resolved(session, paths, "path")
    max_bytes = session.limits.workspace_bytes * 2 + (16 << 20)
    with as_request_errors(session):
        archive = session.sandbox.agent.archive(wanted, max_bytes)
        async with contextlib.aclosing(archive):
            async for chunk in archive:
                yield chunk


class Transfers:
    """Uploads and downloads in the sessions of `manager`, as session activity."""

    def __init__(self, manager: SessionManager, slots: TransferSlots) -> None:
        self._manager = manager
        self._slots = slots

    async def upload(
        self, tenant: str, session_id: str, dest: str, chunks: AsyncIterable[bytes]
    ) -> tuple[int, int]:
        """Unpack the tar archive `chunks` make up below `dest` in the session;
        (files, bytes) unpacked. The session is checked before a chunk is read."""
        session = await self._manager.lookup(tenant, session_id)
        async with self._using(session), self._slots.slot(tenant) as slot:
            return await upload_tar(session, dest, self._slots.paced_in(slot, chunks))

    async def download(
        self, tenant: str, session_id: str, paths: list[str]
    ) -> AsyncGenerator[bytes, None]:
        """A tar archive of the session's `paths` (each under its base name), in chunks."""
        session = await self._manager.lookup(tenant, session_id)
        async with (
            self._using(session),
            self._slots.slot(tenant) as slot,
            contextlib.aclosing(download_tar(session, paths)) as tar,
            contextlib.aclosing(self._slots.paced_out(slot, tar)) as paced,
        ):
            async for chunk in paced:
                yield chunk

    def _using(self, session: Session) -> contextlib.AbstractAsyncContextManager[None]:
        return session_activity(self._manager, session)


@contextlib.asynccontextmanager
async def session_activity(manager: SessionManager, session: Session) -> AsyncIterator[None]:
    """An operator RPC's work in a session (a transfer, a snapshot): busy
    while inside; a failure on a lost sandbox closes the session."""
    with session.in_use():
        try:
            yield
        except Exception as exc:
            # However the failure was spelled, a dead sandbox is what to report.
            reason = session.sandbox.lost
            if not reason:
                raise
            await manager.lose(session, reason)
            msg = f"SANDBOX_LOST: session {session.id} is closed: {reason}"
            raise SessionUnusable(msg) from exc
