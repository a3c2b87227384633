"""Snapshots of sessions: take, list, delete, restore in place, fork, start from one.

A snapshot holds `/workspace` (and `/tmp` when asked), the shell's
directory and persisted exports (references to secrets, never values:
`agent/redact.py` keeps them out of shell state, and a capture holding a
value anywhere is refused, see `archive.py`), and what a fork needs of
the session's spec.
Processes are not part of it.

Taking one, restoring one and forking from a live session hold the
session's write lock: a write call running meanwhile is seen whole or not
at all. Bytes go sandbox → daemon (the store) → sandbox; never through the
client.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from runtime.config import Config, Limits
from runtime.constants import TMP, WORKSPACE
from runtime.egress.service import NetworkRequest, proxy_env
from runtime.errors import BadRequest, EngineUnavailable, SnapshotRefused, StateUnavailable
from runtime.observability.metrics import SOURCE_FORK, SOURCE_SNAPSHOT, Metrics
from runtime.policy.allowlist import Allowlist
from runtime.sessions.manager import SessionManager, SessionRequest
from runtime.sessions.records import tool_state_json, wall_of
from runtime.sessions.session import Session
from runtime.sessions.transfers import as_request_errors, session_activity
from runtime.snapshots.archive import area_name, capture, restore_chunks
from runtime.snapshots.staging import RESERVE_KEY
from runtime.snapshots.store import FORK, START, USER, Entry, Snapshot, SnapshotStore, new_id
from runtime.state.db import StateError
from runtime.state.durable import Durable
from runtime.tools.shell_state import ShellState

log = logging.getLogger(__name__)

MAX_FORKS = 16
# How often blobs no snapshot references are looked for (and at start-up).
COLLECT_EVERY_S = 3600.0
# Slack over the areas' limits for tar headers in an archive's byte cap.
ARCHIVE_SLACK = 16 << 20


@dataclasses.dataclass(frozen=True)
class Restored:
    """A session restored in place, and the processes stopped for it."""

    session: Session
    # The background processes' handles.
    stopped_process_ids: list[str]
    # How many other processes (what commands left running).
    stopped_other_processes: int


class Snapshots:
    """Snapshots of the sessions of `manager`, kept in `store`."""

    def __init__(
        self,
        config: Config,
        manager: SessionManager,
        store: SnapshotStore,
        metrics: Metrics | None = None,
        durable: Durable | None = None,
    ) -> None:
        self._config = config
        self._manager = manager
        self.store = store
        self._metrics = metrics or Metrics([])
        self._durable = durable
        self._collector: asyncio.Task[None] | None = None

    # -- start-up and housekeeping ---------------------------------------------
    async def start(self) -> None:
        """Before the sessions are re-adopted: undo forks a crash interrupted,
        then collect unreferenced blobs now and every COLLECT_EVERY_S."""
        try:
            await self.recover()
        except (OSError, sqlite3.Error, StateError, StateUnavailable) as exc:
            log.warning("unfinished forks of a previous run could not be undone: %s", exc)
        self._collector = asyncio.ensure_future(self._collect_every())

    async def stop(self) -> None:
        if self._collector is not None:
            self._collector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._collector

    async def _collect_every(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.store.collect)
            except (OSError, sqlite3.Error, StateError) as exc:
                log.warning("collecting unreferenced snapshot blobs failed: %s", exc)
            await asyncio.sleep(COLLECT_EVERY_S)

    async def recover(self) -> None:
        """A fork is all or none across a crash too: the sessions and snapshots
        of one that never answered are removed (their containers go as ones
        no record names)."""
        forks = await asyncio.to_thread(self.store.unfinished_forks)
        if not forks:
            return
        made: set[str] = set()
        if self._durable is not None:
            made = await self._durable.forget_sessions(lambda r: r.spec.get("fork") in forks)
        await asyncio.to_thread(self.store.forget_forks, forks, made)
        log.warning(
            "removed %d unfinished fork(s) of a previous run and their %d session(s)",
            len(forks),
            len(made),
        )

    # -- taking -------------------------------------------------------------
    async def snapshot(
        self, tenant: str, session_id: str, label: str, include_tmp: bool
    ) -> Snapshot:
        session = self._manager.get(tenant, session_id)
        async with self._using(session), session.write_lock:
            return await self._take(session, label, include_tmp, USER)

    async def _take(self, session: Session, label: str, include_tmp: bool, kind: str) -> Snapshot:
        # A fork's transient snapshot is gone when the fork returns: no quota
        # (the state disk's share and reserve still apply).
        max_bytes = self._max_bytes(session.tenant) if kind != FORK else None
        try:
            with _stored():
                return await self._capture(session, label, include_tmp, kind, max_bytes)
        except SnapshotRefused as exc:
            self._metrics.snapshot_refused(exc.quota)
            raise

    async def _capture(
        self, session: Session, label: str, include_tmp: bool, kind: str, max_bytes: int | None
    ) -> Snapshot:
        await self._purge_orphans()
        staging = await asyncio.to_thread(self.store.staging, session.tenant, max_bytes)
        paths = [WORKSPACE, TMP] if include_tmp else [WORKSPACE]
        cap = session.limits.workspace_bytes + session.limits.tmp_bytes + ARCHIVE_SLACK
        try:
            with as_request_errors(session):
                entries = await capture(
                    session.sandbox.agent.archive(paths, cap, redact=False),
                    staging,
                    {area_name(p): p for p in paths},
                    session.redactor,
                )
        except BaseException:
            staging.discard()
            raise
        snapshot = self._new(session, label, kind, entries, _source_of(session, include_tmp))
        await asyncio.to_thread(self.store.commit, snapshot, entries, staging, max_bytes)
        log.info(
            "snapshot %s of session %s: %d files, %d bytes",
            snapshot.id,
            session.id,
            snapshot.files,
            snapshot.bytes,
            extra={"session_id": session.id},
        )
        return snapshot

    def _new(
        self, session: Session, label: str, kind: str, entries: list[Entry], source: dict[str, Any]
    ) -> Snapshot:
        now = time.time()
        return Snapshot(
            id=new_id(),
            tenant=session.tenant,
            session_id=session.id,
            label=label,
            kind=kind,
            created_at=now,
            expires_at=now + self.store.ttl_seconds,
            bytes=sum(e.size for e in entries),
            files=sum(1 for e in entries if e.kind != "dir"),
            source=source,
        )

    # -- a session's start (workspace_diff's "start") --------------------------
    async def started(self, session: Session, seeded: bool) -> None:
        """Record what the new session's workspace holds: nothing (free), or,
        when an archive seeded it, a snapshot of it (deduplicated)."""
        session.tool_state.start_snapshot = ""
        if not seeded:
            return  # (and the store is not even opened)
        try:
            async with self._using(session), session.write_lock:
                start = await self._take(session, "", False, START)
        except Exception as exc:  # noqa: BLE001 - workspace_diff says so; the session is fine
            log.warning("session %s: no start snapshot (%s)", session.id, exc)
            session.tool_state.start_snapshot = None
            session.tool_state.start_why = str(exc)
        else:
            session.tool_state.start_snapshot = start.id
        await self._keep_start(session)

    async def _keep_start(self, session: Session) -> None:
        """Store what `started` recorded, so that a restarted daemon's
        workspace_diff compares with the same start (the session's record was
        written before its start snapshot was taken)."""
        if self._durable is None:
            return
        with contextlib.suppress(StateUnavailable):  # kept with the next call's record
            await self._durable.touch_session(
                session.id, session.calls, wall_of(session.last_used), tool_state_json(session)
            )

    async def baseline(
        self, session: Session, since: str
    ) -> tuple[list[Entry], Callable[[str], bytes]]:
        """The workspace entries `since` ("start" or a snapshot id of the
        session's tenant), and a reader of their blobs."""
        if since == "start":
            start = session.tool_state.start_snapshot
            if start is None:
                why = session.tool_state.start_why or "unknown"
                msg = f"this session's start was not recorded ({why}); pass a snapshot id as since"
                raise BadRequest(msg)
            if not start:
                return [], self.store.read_blob
            snapshot_id = start
        else:
            snapshot_id = (await self._get(session.tenant, since)).id
        entries = await self._entries(snapshot_id)
        return [e for e in entries if e.area == area_name(WORKSPACE)], self.store.read_blob

    async def _purge_orphans(self) -> None:
        """Start snapshots live as long as their session (no hook sees every
        close: the next store operation removes those of closed sessions)."""
        live = {s.id for s in self._manager.live_sessions()}
        await asyncio.to_thread(self.store.purge_orphans, START, live)

    def _max_bytes(self, tenant: str) -> int | None:
        quota = self._config.quota_of(tenant)
        return quota.snapshot_max_bytes if quota is not None else None

    # -- reading and removing -------------------------------------------------
    async def _get(self, tenant: str, snapshot_id: str) -> Snapshot:
        with _stored():
            return await asyncio.to_thread(self.store.get, tenant, snapshot_id)

    async def _entries(self, snapshot_id: str) -> list[Entry]:
        with _stored():
            return await asyncio.to_thread(self.store.entries, snapshot_id)

    async def listed(self, tenant: str) -> list[Snapshot]:
        with _stored():
            return await asyncio.to_thread(self.store.listed, tenant)

    async def delete(self, tenant: str, snapshot_id: str) -> None:
        with _stored():
            await asyncio.to_thread(self.store.delete, tenant, snapshot_id)

    # -- restoring ------------------------------------------------------------
    async def restore(self, tenant: str, session_id: str, snapshot_id: str) -> Restored:
        """Roll the session's files and shell state back to the snapshot, in
        place; every process of the session but the agent is stopped first."""
        session = self._manager.get(tenant, session_id)
        snapshot = await self._get(tenant, snapshot_id)
        entries = await self._entries(snapshot.id)
        _check_fits(snapshot, entries, session.limits)
        async with self._using(session), session.write_lock:
            restored = await self._stop_processes(session)
            await self._apply(session, snapshot, entries)
        return restored

    async def _stop_processes(self, session: Session) -> Restored:
        """The interpreter, whatever commands left running (`nohup ... &`, setsid'd trees),
        then the background processes (by handle): a restored session runs
        nothing it ran before. The leftovers first: an agent too old to
        stop them refuses before anything changed."""
        stopped = []
        agent = session.sandbox.agent
        # The python tool's interpreter too: files come back, its memory does not.
        await session.tool_state.stop_interpreter()
        with as_request_errors(session):
            others = await agent.stop_leftovers()
            for process in await agent.process_list():
                if process.state == "running":
                    await agent.process_kill(process.process_id)
                    stopped.append(process.process_id)
        return Restored(session, stopped, others)

    async def _apply(self, session: Session, snapshot: Snapshot, entries: list[Entry]) -> None:
        """Replace the session's areas by the snapshot's, then its shell state."""
        areas = [WORKSPACE, TMP] if snapshot.source.get("include_tmp") else [WORKSPACE]
        with _stored(), as_request_errors(session):
            for path in areas:
                chunks = restore_chunks(self.store, entries, area_name(path))
                async with contextlib.aclosing(chunks):
                    await session.sandbox.agent.extract(path, chunks, restore=True)
        shell = snapshot.source.get("shell", {})
        session.tool_state.shell = ShellState(
            cwd=shell.get("cwd", WORKSPACE),
            env_set=dict(shell.get("env_set", {})),
            env_unset=set(shell.get("env_unset", [])),
        )

    # -- new sessions -------------------------------------------------------
    async def create_from(self, tenant: str, request: SessionRequest, snapshot_id: str) -> Session:
        """CreateSession{from_snapshot}: the request's settings, the snapshot's
        files and shell state."""
        snapshot = await self._get(tenant, snapshot_id)
        entries = await self._entries(snapshot.id)
        limits = request.limits.merged_over(self._config.defaults, self._config.maxima)
        _check_fits(snapshot, entries, limits)
        request = dataclasses.replace(request, origin=SOURCE_SNAPSHOT)
        return await self._session_from(tenant, request, snapshot, entries)

    async def _session_from(
        self, tenant: str, request: SessionRequest, snapshot: Snapshot, entries: list[Entry]
    ) -> Session:
        session = await self._manager.create(tenant, request)
        try:
            await self._apply(session, snapshot, entries)
            with _stored():
                await self._purge_orphans()
                start = self._new(session, "", START, entries, snapshot.source)
                await asyncio.to_thread(self.store.copy, start, entries)
            session.tool_state.start_snapshot = start.id
            await self._keep_start(session)
        except BaseException:
            with contextlib.suppress(Exception):
                await self._manager.close(tenant, session.id)
            raise
        return session

    async def fork(
        self, tenant: str, session_id: str, snapshot_id: str, count: int
    ) -> list[Session]:
        """`count` new sessions with the session's (or snapshot's) files, shell
        state and settings; all of them, or none (the made ones are closed)."""
        if not 1 <= count <= MAX_FORKS:
            msg = f"count {count}: expected 1 to {MAX_FORKS} sessions"
            raise BadRequest(msg)
        if bool(session_id) == bool(snapshot_id):
            msg = "name exactly one of session_id (a live session) and snapshot_id"
            raise BadRequest(msg)
        fork_id = "fork_" + uuid.uuid4().hex
        with _stored():
            # Before anything is made: a restart after a crash undoes what was.
            await asyncio.to_thread(self.store.fork_started, fork_id, tenant)
        try:
            return await self._fork(tenant, session_id, snapshot_id, count, fork_id)
        finally:
            with _stored():
                await asyncio.to_thread(self.store.fork_ended, fork_id)

    async def _fork(
        self, tenant: str, session_id: str, snapshot_id: str, count: int, fork_id: str
    ) -> list[Session]:
        transient = None
        if session_id:
            parent = self._manager.get(tenant, session_id)
            async with self._using(parent), parent.write_lock:
                snapshot = transient = await self._take(parent, "", True, FORK)
        else:
            snapshot = await self._get(tenant, snapshot_id)
        try:
            entries = await self._entries(snapshot.id)
            request = dataclasses.replace(_request_from(snapshot.source), fork=fork_id)
            # The maxima may have shrunk since the snapshot was taken.
            limits = request.limits.merged_over(self._config.defaults, self._config.maxima)
            _check_fits(snapshot, entries, limits)
            results = await asyncio.gather(
                *(self._session_from(tenant, request, snapshot, entries) for _ in range(count)),
                return_exceptions=True,
            )
        finally:
            if transient is not None:
                await asyncio.to_thread(self.store.discard, transient.id)
        made = [r for r in results if isinstance(r, Session)]
        failed = [r for r in results if not isinstance(r, Session)]
        if failed:
            for session in made:
                with contextlib.suppress(Exception):
                    await self._manager.close(tenant, session.id)
            first = failed[0]
            if not isinstance(first, Exception):
                raise first
            log.info("fork of %s: %d of %d failed: %s", snapshot.id, len(failed), count, first)
            raise first
        return made

    def _using(self, session: Session) -> contextlib.AbstractAsyncContextManager[None]:
        return session_activity(self._manager, session)


@contextlib.contextmanager
def _stored() -> Iterator[None]:
    """The store's own failures as request errors: a full disk is
    RESOURCE_EXHAUSTED, anything else about state_dir UNAVAILABLE."""
    try:
        yield
    except (OSError, sqlite3.Error, StateError) as exc:
        full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
        if full or "full" in str(exc):
            msg = (
                "the daemon's state directory is full; no snapshot can be stored now "
                f"(raise {RESERVE_KEY} to keep more of it for sessions and calls)"
            )
            raise SnapshotRefused(msg, RESERVE_KEY) from exc
        log.warning("snapshot store failure: %s", exc)
        msg = f"the daemon's snapshot store failed: {exc}"
        raise EngineUnavailable(msg) from exc


def _check_fits(snapshot: Snapshot, entries: list[Entry], limits: Limits) -> None:
    """INVALID_ARGUMENT, before anything changes, for files the target cannot hold."""
    for area, limit, name in (
        ("workspace", limits.workspace_bytes, "workspace_bytes"),
        ("tmp", limits.tmp_bytes, "tmp_bytes"),
    ):
        size = sum(e.size for e in entries if e.area == area)
        if size > limit:
            msg = (
                f"snapshot {snapshot.id} holds {size} bytes of /{area}, over the session's "
                f"{name} limit of {limit}; use a session with a larger limit"
            )
            raise BadRequest(msg)


def _source_of(session: Session, include_tmp: bool) -> dict[str, Any]:
    """What a fork needs of the session: its settings and shell state."""
    shell = session.tool_state.shell
    proxy = proxy_env() if session.network.enabled else {}
    return {
        "include_tmp": include_tmp,
        "image": session.image,
        "runtime": session.runtime,
        "users": list(session.users),
        "root_filesystem": session.root_filesystem,
        "limits": session.limits.model_dump(),
        "allowlist": {
            "read_roots": list(session.allowlist.read_roots),
            "write_roots": list(session.allowlist.write_roots),
            "deny_globs": list(session.allowlist.deny_globs),
        },
        # The proxy's variables come back with the network, if the fork gets one.
        "env": {k: v for k, v in session.env.items() if proxy.get(k) != v},
        "labels": dict(session.labels),
        "ttl_seconds": session.ttl_seconds,
        "idle_seconds": session.idle_seconds,
        # Names only: a fork gets values from secrets_file if its tenant may.
        "secrets": list(session.secrets),
        "network": {
            "allow": session.network.allow_texts(),
            "max_bytes": session.network.max_bytes,
            "max_connections": session.network.max_connections,
        },
        "shell": {
            "cwd": shell.cwd,
            "env_set": dict(shell.env_set),
            "env_unset": sorted(shell.env_unset),
        },
    }


def _request_from(source: dict[str, Any]) -> SessionRequest:
    """The CreateSession a fork makes: the parent's settings, checked again
    against what the caller's tenant may use now."""
    network = source.get("network") or {}
    return SessionRequest(
        image=source.get("image", ""),
        limits=Limits.model_validate(source.get("limits") or {}),
        allowlist=Allowlist(**source["allowlist"]) if source.get("allowlist") else None,
        env=dict(source.get("env") or {}),
        ttl_seconds=float(source.get("ttl_seconds") or 0),
        idle_seconds=float(source.get("idle_seconds") or 0),
        labels=dict(source.get("labels") or {}),
        secrets=list(source.get("secrets") or []),
        network=NetworkRequest(
            allow=list(network["allow"]),
            max_bytes=int(network.get("max_bytes", 0)),
            max_connections=int(network.get("max_connections", 0)),
        )
        if network.get("allow")
        else None,
        runtime=source.get("runtime", ""),
        users=list(source.get("users") or []),
        root_filesystem=source.get("root_filesystem", ""),
        origin=SOURCE_FORK,
    )
