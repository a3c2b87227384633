"""Restarts, on the session manager's side: re-adopting a previous run's
sessions at start-up, waiting for them, and answering for closed ones.

A mixin of `manager.SessionManager` (its state is the manager's); the
per-session parts (the journal written through, re-attaching one sandbox)
are in `sessions.adoption`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from runtime.config import Config
from runtime.errors import BadRequest, EngineUnavailable, SessionNotFound, SessionUnusable
from runtime.observability.metrics import Metrics
from runtime.sandbox.backend import SandboxBackend
from runtime.sessions.adoption import Adopter
from runtime.sessions.journal import Journal
from runtime.sessions.quotas import TenantQuotas
from runtime.sessions.session import CLOSED, Session
from runtime.sessions.views import SessionInfo, info_of, info_of_record
from runtime.state.durable import Durable
from runtime.state.sessions import CLOSED_KEEP_S, REASON_LOST, SessionRecord

log = logging.getLogger(__name__)

# Ids of closed sessions kept in memory (their records are on disk too).
CLOSED_MEMORY = 4096
# How often start-up reconciliation is tried again while the engine is down.
RECONCILE_RETRY_S = 2.0


class RestartOps:
    """Start-up reconciliation and re-adoption; see the module docstring."""

    _config: Config
    _durable: Durable | None
    _backend: SandboxBackend
    _secrets: dict[str, str]
    _sessions: dict[str, Session]
    _closed: OrderedDict[str, SessionRecord]
    _records: list[SessionRecord]
    _adopting: dict[str, asyncio.Future[None]]
    _shutting_down: bool
    _reaped: bool
    _metrics: Metrics
    quotas: TenantQuotas

    if TYPE_CHECKING:

        def _spawn(self, coro: Any) -> None: ...
        async def _ensure_reaped(self) -> None: ...
        def _new_journal(self) -> Journal: ...
        async def _connect(self, session: Session) -> None: ...
        def get(self, tenant: str, session_id: str) -> Session: ...
        async def lose(self, session: Session, reason: str) -> None: ...

    async def _reconcile_later(self) -> None:
        while not self._reaped and not self._shutting_down:
            await asyncio.sleep(RECONCILE_RETRY_S)
            try:
                await self._ensure_reaped()
            except EngineUnavailable:
                continue

    async def _reap_previous_run(self) -> None:
        """Remove containers of this instance nobody has state for, close the
        records whose container is gone, start re-attaching the others."""
        if self._durable is None:
            reaped = await self._backend.reap_owned()
        else:
            owned = {sid for sid in await self._backend.list_owned() if sid}
            known = {r.id for r in self._records} | set(self._sessions)
            stale = owned - known
            await asyncio.gather(
                *(self._backend.destroy(sid) for sid in stale), return_exceptions=True
            )
            reaped = len(stale)
            adopter = Adopter(
                self._durable,
                self._backend,
                self._new_journal,
                self._secrets,
                self._adopted,
                self._record_lost,
            )
            records, self._records = self._records, []
            for record in records:
                if record.id not in owned:
                    await self._record_lost(record, "its container is gone")
            alive = [record for record in records if record.id in owned]
            if alive:
                self._spawn(self._adopt_all(adopter, alive))
        self._reaped = True
        if reaped:
            log.info(
                "removed %d sandbox(es) left by a previous run of %s", reaped, self._config.instance
            )

    async def _adopt_all(self, adopter: Adopter, records: list[SessionRecord]) -> None:
        started = time.monotonic()
        await asyncio.gather(*(self._adopt(adopter, r) for r in records))
        adopted = sum(1 for r in records if r.id in self._sessions)
        log.info(
            "re-adopted %d of %d session(s) in %.0f ms",
            adopted,
            len(records),
            (time.monotonic() - started) * 1000,
        )

    async def _adopt(self, adopter: Adopter, record: SessionRecord) -> None:
        try:
            await adopter.adopt(record)
        finally:
            waiting = self._adopting.pop(record.id, None)
            if waiting is not None and not waiting.done():
                waiting.set_result(None)

    async def _adopted(self, session: Session) -> None:
        """A previous run's session, re-attached: serve it again."""
        if self._shutting_down:
            session.sandbox.abort("the daemon is shutting down")
            return
        self.quotas.count(session.tenant, session.limits)
        self._sessions[session.id] = session
        self._watch(session)
        if session.network.enabled:
            await self._connect(session)
        self._metrics.session_created("adopted", 0.0)

    def _watch(self, session: Session) -> None:
        """A sandbox that dies on its own closes its session at once (sandbox_lost)."""
        session.sandbox.watch(lambda reason: self._spawn(self.lose(session, reason)))

    async def _record_lost(self, record: SessionRecord, why: str) -> None:
        """A previous run's session whose sandbox is gone: closed, sandbox_lost."""
        log.warning("session %s lost its sandbox while the daemon was down: %s", record.id, why)
        with contextlib.suppress(EngineUnavailable, BadRequest):
            await self._backend.destroy(record.id)
        assert self._durable is not None
        await self._durable.close_session(record.id, REASON_LOST, time.time())
        record.state, record.closed_reason, record.closed_at = CLOSED, REASON_LOST, time.time()
        self._remember_closed(record)
        self._metrics.session_closed(REASON_LOST)
        waiting = self._adopting.pop(record.id, None)
        if waiting is not None and not waiting.done():
            waiting.set_result(None)

    async def lookup(self, tenant: str, session_id: str) -> Session:
        """`get`, after waiting (bounded) for the session's re-adoption."""
        waiting = self._adopting.get(session_id)
        if waiting is not None:
            try:
                await asyncio.wait_for(asyncio.shield(waiting), self._config.create_timeout_s)
            except TimeoutError:
                msg = f"session {session_id!r} is still being re-adopted after a restart; retry"
                raise EngineUnavailable(msg) from None
        try:
            return self.get(tenant, session_id)
        except SessionNotFound:
            if await self._was_lost(tenant, session_id):
                # DESIGN: a session whose sandbox was just lost is FAILED_PRECONDITION
                # (SANDBOX_LOST) for RPCs, SANDBOX_LOST for its calls; not "no session".
                msg = f"SANDBOX_LOST: session {session_id} is closed: its sandbox was lost"
                raise SessionUnusable(msg) from None
            raise

    async def _was_lost(self, tenant: str, session_id: str) -> bool:
        closing = self._sessions.get(session_id)
        if closing is not None and closing.tenant == tenant:
            if closing.closed_reason != REASON_LOST:
                return False
            # Answer once it is closed (its container removed), as a call
            # that finds the sandbox lost does.
            deadline = time.monotonic() + self._config.docker_timeout_s
            while session_id in self._sessions and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return True
        record = await self._closed_record(tenant, session_id)
        return record is not None and record.closed_reason == REASON_LOST

    async def describe(self, tenant: str, session_id: str) -> SessionInfo:
        """An open (or closing) session, or one closed within the last hour, as
        its client sees it."""
        try:
            return info_of(await self.lookup(tenant, session_id))
        except (SessionNotFound, SessionUnusable):
            closing = self._sessions.get(session_id)
            if closing is not None and closing.tenant == tenant:
                return info_of(closing)  # state "closing"
            record = await self._closed_record(tenant, session_id)
            if record is None:
                msg = f"no open session {session_id!r}"
                raise SessionNotFound(msg) from None
            return info_of_record(record)

    def _remember_closed(self, record: SessionRecord) -> None:
        self._closed[record.id] = record
        while len(self._closed) > CLOSED_MEMORY:
            self._closed.popitem(last=False)

    async def _closed_record(self, tenant: str, session_id: str) -> SessionRecord | None:
        record = self._closed.get(session_id)
        if record is not None and record.closed_at < time.time() - CLOSED_KEEP_S:
            record = None
        if record is None and self._durable is not None:
            record = await self._durable.closed_record(session_id)
        return record if record is not None and record.tenant == tenant else None

    async def adoption_done(self) -> None:
        """Wait (bounded) until a previous run's sessions are re-adopted or lost."""
        pending = [asyncio.shield(f) for f in self._adopting.values()]
        if pending:
            await asyncio.wait(pending, timeout=self._config.create_timeout_s)
