"""Sessions' lifecycle: create (admission, warm pool), look up, close, expire, shut down.

What runs in an open session lives beside it: tool calls in
`sessions.calls`, uploads and downloads in `sessions.transfers`.

With a state database (`Durable`), every session is recorded before
CreateSession answers and closed there with its reason (GetSession and
CloseSession answer for it an hour after, across restarts), and a start-up
re-adopts what a previous run left (`sessions.adoption`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from runtime.agent.redact import Redactor
from runtime.clock import REAL_CLOCK, Clock
from runtime.config import Config, Limits, tmpfs_overflow
from runtime.constants import WORKSPACE, client_label
from runtime.egress.service import Egress, NetworkRequest, proxy_env
from runtime.errors import (
    AdmissionRefused,
    BadRequest,
    DaemonStopping,
    EngineUnavailable,
    PermissionDenied,
    SessionNotFound,
    ToolFailure,
)
from runtime.observability.metrics import SOURCE_COLD, SOURCE_POOL, Metrics
from runtime.policy.allowlist import Allowlist, PathPolicy, session_policy
from runtime.policy.hosts import NetworkPolicy
from runtime.sandbox.backend import Sandbox, SandboxBackend, SandboxSpec
from runtime.sessions import grants
from runtime.sessions.admission import available_memory, check_memory
from runtime.sessions.adoption import SessionSink
from runtime.sessions.journal import Journal
from runtime.sessions.pool import WarmPool
from runtime.sessions.quotas import TenantQuotas
from runtime.sessions.reaper import Expiry, clamp_window
from runtime.sessions.records import record_of
from runtime.sessions.restarts import RestartOps
from runtime.sessions.session import CLOSED, CLOSING, READY, Session
from runtime.sessions.transfers import upload_tar
from runtime.state.durable import Durable
from runtime.state.sessions import (
    REASON_CLOSED,
    REASON_LOST,
    REASON_SHUTDOWN,
    SessionRecord,
)
from runtime.tools.validation import env_problem

log = logging.getLogger(__name__)

# Records of sessions closed over an hour ago are purged every this many closes.
PURGE_EVERY = 256
# A sandbox the engine failed to remove at close is tried again after these
# pauses (seconds, about 10 minutes in all); a daemon that stops meanwhile
# removes it at its next start, as every container of a closed session.
REMOVAL_RETRIES_S = (1.0, 4.0, 15.0, 60.0, 120.0, 400.0)


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
    # Names of secrets_file entries its commands get as environment variables.
    secrets: list[str] = field(default_factory=list)
    # Hosts the session may reach through the egress proxy (None: no network).
    network: NetworkRequest | None = None
    # OCI runtime: "" for the config's `runtime`, or one of its `runtimes`.
    runtime: str = ""
    # Users besides the sandbox user its programs may name (the tenant's
    # `users` grant them), and "read-only" ("" too) or "writable".
    users: list[str] = field(default_factory=list)
    root_filesystem: str = ""
    # What the creation counts as in the metrics when not simply pool or
    # cold: "fork" or "snapshot" (the snapshots' facade sets it).
    origin: str = ""
    # The fork making it, if any: kept in its record so that a restart can
    # remove the sessions of a fork a crash cut short.
    fork: str = ""


class SessionManager(RestartOps):
    """The open sessions of every tenant, and the sandboxes under them."""

    def __init__(
        self,
        config: Config,
        backend: SandboxBackend,
        on_ended: Callable[[Session, str], None] | None = None,
        secrets: dict[str, str] | None = None,
        egress: Egress | None = None,
        metrics: Metrics | None = None,
        durable: Durable | None = None,
        clock: Clock = REAL_CLOCK,
    ) -> None:
        self._config = config
        # Sessions and journals on disk (None: in memory only, gone with the process).
        self._durable = durable
        # secrets_file's values (secret_store.load_secrets); only names leave here.
        self._secrets = dict(secrets or {})
        self._backend = backend
        self._metrics = metrics or Metrics([])
        # Told of every session the daemon ends itself (TTL, idle, a lost
        # sandbox, shutdown) with the reason; CloseSession's caller knows already.
        self._on_ended = on_ended or (lambda session, reason: None)
        self.quotas = TenantQuotas(config, clock)
        self.egress = egress or Egress(config)
        self._sessions: dict[str, Session] = {}
        # Sessions closed lately, as their records (GetSession, CloseSession
        # again), also while their closing is being stored.
        self._closed: OrderedDict[str, SessionRecord] = OrderedDict()
        # A previous run's sessions: found in the state database at start,
        # then being re-attached (their calls wait on these futures).
        self._records: list[SessionRecord] = []
        self._adopting: dict[str, asyncio.Future[None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closes = 0
        self._creating = 0
        self._shutting_down = False
        self._keep = False
        self._reaped = False
        self._reap_lock = asyncio.Lock()
        self._pool: WarmPool | None = None
        if config.pool_size:
            self._pool = WarmPool(
                config, backend, self._ensure_reaped, self._has_room, clock.monotonic
            )

    async def start(self) -> None:
        if self._durable is not None:
            await self._durable.purge_closed()
            self._records = await self._durable.open_records()
            loop = asyncio.get_running_loop()
            self._adopting = {r.id: loop.create_future() for r in self._records}
        try:
            await self._ensure_reaped()
        except EngineUnavailable as exc:
            # Serve anyway (CreateSession answers UNAVAILABLE meanwhile); the
            # leftovers are removed and the sessions re-adopted once it answers.
            log.warning("%s; will retry until the engine answers", exc)
            self._spawn(self._reconcile_later())
        # Sessions still being re-adopted keep theirs: their containers have
        # its inode mounted (the static agent's channel and the relay).
        self.egress.sweep([*self._sessions, *self._adopting])
        if self._pool is not None:
            self._pool.start()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def stopping(self) -> bool:
        """The daemon shuts down keeping its sessions: calls end UNAVAILABLE."""
        return self._shutting_down and self._keep

    @property
    def pool(self) -> WarmPool | None:
        return self._pool

    def _live(self) -> int:
        pooled = self._pool.count() if self._pool is not None else 0
        return len(self._sessions) + self._creating + pooled

    def _has_room(self) -> bool:
        """Whether the pool may start one more container."""
        if self._shutting_down or self._live() >= self._config.max_sessions:
            return False
        floor = self._config.min_available_memory_bytes
        return not floor or available_memory() >= floor

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

    def _new_journal(self) -> Journal:
        return Journal(
            self._config.journal_max_results,
            self._config.journal_max_bytes,
            self._config.journal_max_ids,
        )

    # -- lifecycle ----------------------------------------------------------
    async def create(self, tenant: str, request: SessionRequest) -> Session:
        """Validate the request, provision its sandbox, then finish the
        session in it (any failure there closes the session again)."""
        started = time.monotonic()
        limits, paths, names, network = self._validated(tenant, request)
        runtime = self._runtime_of(request)
        grant = grants.grant(self._config, tenant, request.users, request.root_filesystem, runtime)
        env = {**proxy_env(), **request.env} if network.enabled else dict(request.env)
        session_id = uuid.uuid4().hex
        spec = SandboxSpec(
            session_id=session_id,
            image=request.image or self._config.image,
            limits=limits,
            tenant=tenant,
            labels=request.labels,
            runtime=runtime,
            root_capabilities=grant.root_capabilities,
            writable_root=grant.writable_root,
        )
        self.quotas.admit(tenant, spec.image, spec.runtime, limits)
        try:
            spec, sandbox = await self._sandbox_for(spec, request)
        except BaseException:
            self.quotas.release(tenant, limits)
            raise
        spec_id, session_id = session_id, spec.session_id
        session = Session(
            id=session_id,
            tenant=tenant,
            image=spec.image,
            limits=limits,
            allowlist=paths,
            network=network,
            env=env,
            labels={k: v for k, v in request.labels.items() if client_label(k)},
            sandbox=sandbox,
            runtime=spec.runtime,
            ttl_seconds=clamp_window(
                request.ttl_seconds, self._config.default_ttl_seconds, self._config.max_ttl_seconds
            ),
            idle_seconds=clamp_window(
                request.idle_seconds,
                self._config.default_idle_seconds,
                self._config.max_idle_seconds,
            ),
            journal=self._new_journal(),
            secrets=names,
            redactor=Redactor({name: self._secrets[name] for name in names}),
            users=grant.users,
            root_capabilities=grant.root_capabilities,
            root_filesystem=grants.ROOT_WRITABLE if grant.writable_root else grants.ROOT_READ_ONLY,
        )
        self._sessions[session_id] = session
        self._watch(session)
        await self._finish(session, request)
        source = request.origin or (SOURCE_COLD if session_id == spec_id else SOURCE_POOL)
        self._metrics.session_created(source, time.monotonic() - started)
        log.info(
            "session %s created (image %s, tenant %s, %s)",
            session_id,
            spec.image,
            tenant,
            source,
            extra={"session_id": session_id},
        )
        return session

    def _validated(
        self, tenant: str, request: SessionRequest
    ) -> tuple[Limits, PathPolicy, list[str], NetworkPolicy]:
        """What the request settles on once checked (nothing is started yet):
        its limits, paths, secret names and network policy."""
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
        names = self._secret_names(tenant, request.secrets)
        return limits, paths, names, self.egress.policy_for(tenant, request.network)

    async def _finish(self, session: Session, request: SessionRequest) -> None:
        """Hand the new session its secrets, network, workspace and record."""
        if self._shutting_down:
            await self._close(session)
            msg = "the daemon is shutting down"
            raise AdmissionRefused(msg)
        if session.secrets:
            async with self._closed_on_failure(
                session, "its secrets could not be handed to the sandbox"
            ):
                await session.sandbox.agent.set_secrets(session.redactor.secrets)
        if session.network.enabled:
            await self._connect(session)
        if request.workspace_tar:
            async with self._closed_on_failure(session, "its workspace_tar could not be unpacked"):
                await upload_tar(session, WORKSPACE, request.workspace_tar)
        if self._durable is not None:
            session.journal.sink = SessionSink(self._durable, session)
            record = record_of(session)
            if request.fork:
                record.spec["fork"] = request.fork
            async with self._closed_on_failure(session, "its record could not be stored"):
                await self._durable.save_session(record)

    @contextlib.asynccontextmanager
    async def _closed_on_failure(self, session: Session, why: str) -> AsyncIterator[None]:
        """The undo of a session being made: a step that fails closes it for `why`."""
        try:
            yield
        except BaseException:
            await self._close(session, why)
            raise

    def _secret_names(self, tenant: str, asked: list[str]) -> list[str]:
        """The distinct names asked for: INVALID_ARGUMENT for one secrets_file
        lacks, PERMISSION_DENIED for one the tenant may not use."""
        names = list(dict.fromkeys(asked))
        unknown = [name for name in names if name not in self._secrets]
        if unknown:
            known = ", ".join(sorted(self._secrets)) or "none (no secrets_file is configured)"
            msg = f"unknown secret(s) {', '.join(unknown)[:200]}; the daemon's secrets: {known}"
            raise BadRequest(msg)
        self.quotas.check_secrets(tenant, names)
        return names

    def _runtime_of(self, request: SessionRequest) -> str:
        """The runtime a session asked for, if the operator allows it."""
        allowed = self._config.allowed_runtimes()
        if request.runtime and request.runtime not in allowed:
            names = ", ".join(repr(r) for r in allowed)
            msg = f"runtime {request.runtime!r} is not offered here; the daemon's runtimes: {names}"
            raise PermissionDenied(msg)
        return request.runtime or self._config.runtime

    async def _sandbox_for(
        self, spec: SandboxSpec, request: SessionRequest
    ) -> tuple[SandboxSpec, Sandbox]:
        """A warm container when one fits, else a new one (admission checked)."""
        check_memory(self._config)
        pool, limits = self._pool, spec.limits
        # Claiming a warm container moves it from the pool to the sessions:
        # the live count stays the same, so a full daemon can still serve it.
        # Warm containers have the default root (read-only, no capabilities).
        pooled = pool if not (spec.root_capabilities or spec.writable_root) else None
        if pooled is None or not pooled.can_serve(spec.image, limits, request.labels, spec.runtime):
            if pool is not None and self._live() >= self._config.max_sessions:
                # A session needs the slot more than a warm container, ready
                # or still being created.
                if not pool.evict():
                    pool.yield_filling()
            self._refuse_if_full()
        self._creating += 1
        try:
            await self._ensure_reaped()
            warm = (
                await pooled.claim(spec.image, limits, request.labels, spec.runtime)
                if pooled
                else None
            )
            if warm is not None:
                return replace(spec, session_id=warm.session_id), warm.sandbox
            if pool is not None and self._live() > self._config.max_sessions:
                # The warm container this request counted on is gone.
                msg = f"the configured maximum of {self._config.max_sessions} sessions is live"
                raise AdmissionRefused(msg)
            return spec, await self._backend.create(spec)
        finally:
            self._creating -= 1

    async def _connect(self, session: Session) -> None:
        """Open the session's proxy and have its agent relay to it; else close it."""
        try:
            async with self._closed_on_failure(session, "its network could not be set up"):
                await self.egress.open(session.id, session.network, session.tenant)
                await session.sandbox.agent.relay_start()
        except (ToolFailure, OSError) as exc:
            reason = exc.message if isinstance(exc, ToolFailure) else str(exc)
            msg = f"the session's network could not be set up: {reason}"
            raise EngineUnavailable(msg) from exc

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

    async def expire(self, session: Session, expiry: Expiry) -> None:
        """Close `session` past its TTL or idle limit; its running calls get the reason."""
        await self._close(session, expiry.reason, expiry.code)
        self._metrics.session_closed(expiry.code)
        self._on_ended(session, expiry.reason)

    async def close(self, tenant: str, session_id: str) -> str:
        waiting = self._adopting.get(session_id)
        if waiting is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiting), self._config.create_timeout_s)
        session = self._sessions.get(session_id)
        if session is None or session.tenant != tenant:
            if await self._closed_record(tenant, session_id) is not None:
                return CLOSED
            msg = f"no session {session_id!r}"
            raise SessionNotFound(msg)
        await self._close(session)
        self._metrics.session_closed(REASON_CLOSED)
        return CLOSED

    async def _close(
        self, session: Session, reason: str = "the session was closed", code: str = REASON_CLOSED
    ) -> None:
        if session.state == READY:
            session.state = CLOSING
            session.closed_reason = code
            session.sandbox.abort(reason)
        try:
            await session.tool_state.stop_interpreter()
            await self.egress.close(session.id)
            await self._destroy(session.id)
        finally:
            session.state = CLOSED
            session.closed_reason = session.closed_reason or code
            if self._sessions.pop(session.id, None) is not None:
                self.quotas.release(session.tenant, session.limits)
            closed = record_of(session)
            closed.closed_at = time.time()
            self._remember_closed(closed)
            if self._pool is not None:
                self._pool.start()  # a slot under max_sessions may have come free
            log.info("session %s closed", session.id, extra={"reason": session.closed_reason})
        if self._durable is not None:
            # Before CloseSession answers: closing again stays idempotent after a restart.
            await self._durable.close_session(session.id, session.closed_reason, time.time())
            self._closes += 1
            if self._closes % PURGE_EVERY == 0:
                self._spawn(self._durable.purge_closed())

    async def _destroy(self, session_id: str) -> None:
        """Remove a closed session's sandbox; when the engine fails to, the
        close still fails as it did (UNAVAILABLE), and the removal is tried
        again in the background so no container outlives its session."""
        try:
            await self._backend.destroy(session_id)
        except EngineUnavailable as exc:
            log.warning("removing the sandbox of %s failed (%s); retrying", session_id, exc)
            self._spawn(self._destroy_later(session_id))
            raise

    async def _destroy_later(self, session_id: str) -> None:
        for pause in REMOVAL_RETRIES_S:
            await asyncio.sleep(pause)
            try:
                await self._backend.destroy(session_id)
            except EngineUnavailable as exc:
                log.warning("removing the sandbox of %s failed again (%s)", session_id, exc)
                continue
            log.info("the sandbox of %s is removed", session_id)
            return
        log.error("gave up removing the sandbox of %s; the next start removes it", session_id)

    async def lose(self, session: Session, reason: str) -> None:
        """The sandbox died under a call or transfer: close the session, once."""
        if session.state != READY:
            return
        log.warning("session %s lost its sandbox: %s", session.id, reason)
        await self._close(session, reason, REASON_LOST)
        self._metrics.session_closed(REASON_LOST)
        self._on_ended(session, reason)

    async def shutdown(self, keep: bool = False) -> None:
        """Stop serving sessions: with `keep`, answer in-flight calls
        UNAVAILABLE (DaemonStopping) and leave every sandbox running for the
        next start; else answer them SANDBOX_LOST and close every session.
        Warm containers are removed either way."""
        self._shutting_down = True
        self._keep = keep
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._pool is not None:
            await self._pool.close()
        if keep:
            stopping = DaemonStopping(
                "the daemon is restarting; the call keeps running in its sandbox: "
                "retry with the same call id"
            )
            for session in list(self._sessions.values()):
                session.sandbox.abort("the daemon is restarting", stopping)
            # Let the aborted calls end their RPCs before the connections go.
            await asyncio.sleep(0)
            await self.egress.shutdown()
            return
        sessions = list(self._sessions.values())
        for session in sessions:
            if session.state == READY:
                session.state = CLOSING
                session.sandbox.abort("the daemon is shutting down")
        # Let the aborted calls turn into results before sandboxes vanish.
        await asyncio.sleep(0)
        await asyncio.gather(
            *(self._close(s, "the daemon is shutting down", REASON_SHUTDOWN) for s in sessions),
            return_exceptions=True,
        )
        for session in sessions:
            self._metrics.session_closed(REASON_SHUTDOWN)
            self._on_ended(session, "the daemon is shutting down")
        await self.egress.shutdown()
