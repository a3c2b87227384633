"""Sessions' lifecycle: create (admission, warm pool), look up, close, expire, shut down.

What runs in an open session lives beside it: tool calls in
`sessions.calls`, uploads and downloads in `sessions.transfers`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from runtime.config import Config, Limits, tmpfs_overflow
from runtime.constants import WORKSPACE
from runtime.errors import AdmissionRefused, BadRequest, EngineUnavailable, SessionNotFound
from runtime.policy.allowlist import session_policy
from runtime.sandbox.backend import SandboxBackend, SandboxSpec
from runtime.sessions.admission import check_memory
from runtime.sessions.journal import Journal
from runtime.sessions.pool import WarmPool
from runtime.sessions.reaper import clamp_window
from runtime.sessions.session import CLOSED, CLOSING, READY, Allowlist, Session
from runtime.sessions.transfers import upload_tar
from runtime.tools.validation import env_problem

log = logging.getLogger(__name__)

# Ids of closed sessions kept so that closing twice answers "closed".
CLOSED_MEMORY = 4096


@dataclass
class SessionRequest:
    """What a client asked for; zero/empty fields mean "the default"."""

    image: str = ""
    limits: Limits = field(
        default_factory=lambda: Limits.model_validate(dict.fromkeys(Limits.model_fields, 0))
    )
    allowlist: Allowlist | None = None
    env: dict[str, str] = field(default_factory=dict)
    ttl_seconds: float = 0
    idle_seconds: float = 0
    labels: dict[str, str] = field(default_factory=dict)
    # A tar archive unpacked into /workspace before the session is returned.
    workspace_tar: bytes = b""


class SessionManager:
    """The open sessions of every tenant, and the sandboxes under them."""

    def __init__(self, config: Config, backend: SandboxBackend) -> None:
        self._config = config
        self._backend = backend
        self._sessions: dict[str, Session] = {}
        self._closed: OrderedDict[str, str] = OrderedDict()
        self._creating = 0
        self._shutting_down = False
        self._reaped = False
        self._reap_lock = asyncio.Lock()
        self._pool: WarmPool | None = None
        if config.pool_size:
            self._pool = WarmPool(config, backend, self._ensure_reaped, self._has_room)

    async def start(self) -> None:
        try:
            await self._reap_previous_run()
        except EngineUnavailable as exc:
            # Serve anyway (CreateSession answers UNAVAILABLE meanwhile); the
            # leftovers are removed before the first sandbox is created.
            log.warning("%s; will retry before the first session", exc)
        if self._pool is not None:
            self._pool.start()

    @property
    def pool(self) -> WarmPool | None:
        return self._pool

    def _live(self) -> int:
        pooled = self._pool.count() if self._pool is not None else 0
        return len(self._sessions) + self._creating + pooled

    def _has_room(self) -> bool:
        return not self._shutting_down and self._live() < self._config.max_sessions

    def _refuse_if_full(self) -> None:
        live = self._live()
        if live >= self._config.max_sessions:
            msg = (
                f"{live} sessions are live (warm pool included), the configured maximum "
                f"is {self._config.max_sessions}; close one or retry later"
            )
            raise AdmissionRefused(msg)

    async def _ensure_reaped(self) -> None:
        # One reap at a time: a second one could remove what the first let
        # a concurrent create (or pool fill) start in the meantime.
        async with self._reap_lock:
            if not self._reaped:
                await self._reap_previous_run()

    async def _reap_previous_run(self) -> None:
        reaped = await self._backend.reap_owned()
        self._reaped = True
        if reaped:
            log.info(
                "removed %d sandbox(es) left by a previous run of %s", reaped, self._config.instance
            )

    # -- lifecycle ----------------------------------------------------------
    async def create(self, tenant: str, request: SessionRequest) -> Session:
        if self._shutting_down:
            msg = "the daemon is shutting down"
            raise AdmissionRefused(msg)
        for key, value in request.env.items():
            problem = env_problem(key, value)
            if problem:
                msg = f"env {key[:60]!r}: {problem}"
                raise BadRequest(msg)
        limits = request.limits.merged_over(self._config.defaults, self._config.maxima)
        problem = tmpfs_overflow(limits.workspace_bytes, limits.tmp_bytes, limits.memory_bytes)
        if problem:
            msg = f"limits (after defaults and maxima): {problem}"
            raise BadRequest(msg)
        paths = session_policy(request.allowlist, self._config.allowlist_max_roots)
        session_id = uuid.uuid4().hex
        spec = SandboxSpec(
            session_id=session_id,
            image=request.image or self._config.image,
            limits=limits,
            tenant=tenant,
            labels=request.labels,
            runtime=self._config.runtime,
        )
        check_memory(self._config)
        pool = self._pool
        # Claiming a warm container moves it from the pool to the sessions:
        # the live count stays the same, so a full daemon can still serve it.
        if pool is None or not pool.can_serve(spec.image, limits, tenant, request.labels):
            self._refuse_if_full()
        self._creating += 1
        try:
            await self._ensure_reaped()
            warm = await pool.claim(spec.image, limits, tenant, request.labels) if pool else None
            if warm is not None:
                session_id, sandbox = warm.session_id, warm.sandbox
                spec = replace(spec, session_id=session_id)
            else:
                if pool is not None and self._live() > self._config.max_sessions:
                    # The warm container this request counted on is gone.
                    msg = f"the configured maximum of {self._config.max_sessions} sessions is live"
                    raise AdmissionRefused(msg)
                sandbox = await self._backend.create(spec)
        finally:
            self._creating -= 1
        session = Session(
            id=session_id,
            tenant=tenant,
            image=spec.image,
            limits=limits,
            allowlist=paths,
            env=dict(request.env),
            labels={k: v for k, v in request.labels.items() if not k.startswith("toolrt.")},
            sandbox=sandbox,
            ttl_seconds=clamp_window(
                request.ttl_seconds, self._config.default_ttl_seconds, self._config.max_ttl_seconds
            ),
            idle_seconds=clamp_window(
                request.idle_seconds,
                self._config.default_idle_seconds,
                self._config.max_idle_seconds,
            ),
            journal=Journal(
                self._config.journal_max_results,
                self._config.journal_max_bytes,
                self._config.journal_max_ids,
            ),
        )
        self._sessions[session_id] = session
        if self._shutting_down:
            await self._close(session)
            msg = "the daemon is shutting down"
            raise AdmissionRefused(msg)
        if request.workspace_tar:
            try:
                await upload_tar(session, WORKSPACE, request.workspace_tar)
            except BaseException:
                await self._close(session, "its workspace_tar could not be unpacked")
                raise
        log.info("session %s created (image %s, tenant %s)", session_id, spec.image, tenant)
        return session

    def get(self, tenant: str, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None or session.tenant != tenant or session.state != READY:
            msg = f"no open session {session_id!r}"
            raise SessionNotFound(msg)
        return session

    def sessions_of(self, tenant: str) -> list[Session]:
        return [s for s in self._sessions.values() if s.tenant == tenant and s.state == READY]

    def live_sessions(self) -> list[Session]:
        """Every session of every tenant that is not closed yet (for the reaper)."""
        return list(self._sessions.values())

    async def expire(self, session: Session, reason: str) -> None:
        """Close `session` for `reason` (TTL or idle); its running calls get it."""
        await self._close(session, reason)

    async def close(self, tenant: str, session_id: str) -> str:
        session = self._sessions.get(session_id)
        if session is None or session.tenant != tenant:
            if self._closed.get(session_id) == tenant:
                return CLOSED
            msg = f"no session {session_id!r}"
            raise SessionNotFound(msg)
        await self._close(session)
        return CLOSED

    async def _close(self, session: Session, reason: str = "the session was closed") -> None:
        if session.state == READY:
            session.state = CLOSING
            session.sandbox.abort(reason)
        try:
            await self._backend.destroy(session.id)
        finally:
            session.state = CLOSED
            self._sessions.pop(session.id, None)
            self._closed[session.id] = session.tenant
            while len(self._closed) > CLOSED_MEMORY:
                self._closed.popitem(last=False)
            if self._pool is not None:
                self._pool.start()  # a slot under max_sessions may have come free
            log.info("session %s closed", session.id)

    async def lose(self, session: Session, reason: str) -> None:
        """The sandbox died under a call or transfer: close the session, once."""
        if session.state != READY:
            return
        log.warning("session %s lost its sandbox: %s", session.id, reason)
        await self._close(session, reason)

    async def shutdown(self) -> None:
        """Answer every in-flight call (SANDBOX_LOST) and close every session."""
        self._shutting_down = True
        if self._pool is not None:
            await self._pool.close()
        sessions = list(self._sessions.values())
        for session in sessions:
            if session.state == READY:
                session.state = CLOSING
                session.sandbox.abort("the daemon is shutting down")
        # Let the aborted calls turn into results before sandboxes vanish.
        await asyncio.sleep(0)
        await asyncio.gather(*(self._close(s) for s in sessions), return_exceptions=True)
