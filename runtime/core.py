"""The one composition root: `build_core(config)` wires backend, tools, sessions and audit.

Every front builds on it (the gRPC daemon in `server.app`, `toolrt mcp`, the
tests), so each gets the same wiring; none constructs a backend or a
session manager itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, replace

from runtime.admin import Admin
from runtime.audit import DAEMON, AuditLog
from runtime.clock import REAL_CLOCK, Clock
from runtime.config import Config
from runtime.descriptors import quiet_exhaustion
from runtime.egress.proxy import EgressEvent
from runtime.egress.service import Egress
from runtime.errors import AuditUnavailable
from runtime.observability import Observability
from runtime.sandbox.backend import SandboxBackend
from runtime.secret_store import load_secrets
from runtime.sessions.calls import Calls
from runtime.sessions.manager import SessionManager
from runtime.sessions.programs import Programs
from runtime.sessions.reaper import Reaper
from runtime.sessions.running_execs import RunningExecs
from runtime.sessions.session import Session
from runtime.sessions.slots import TransferSlots
from runtime.sessions.transfers import Transfers
from runtime.snapshots.service import Snapshots
from runtime.snapshots.store import COMPONENT as SNAPSHOTS
from runtime.snapshots.store import SnapshotStore
from runtime.snapshots.workspace_diff import WORKSPACE_DIFF
from runtime.state.db import StateDB, default_state_dir
from runtime.state.durable import COMPONENTS, Durable
from runtime.state.lock import StateLock
from runtime.tools.registry import TOOLS, Registry

log = logging.getLogger(__name__)


@dataclass
class Core:
    """What a front serves: sessions and their tools on a sandbox backend."""

    config: Config
    backend: SandboxBackend
    registry: Registry
    # Sessions' lifecycle; what runs in them goes through the facades below.
    manager: SessionManager
    calls: Calls
    transfers: Transfers
    reaper: Reaper
    # Who did what: session events, calls, transfers, refused authentications.
    audit: AuditLog
    # Sessions' network proxies; fronts set `egress.on_event` (audit, metrics).
    egress: Egress
    # What operators see: metrics, traces, the log context; the Admin* RPCs' answers.
    obs: Observability
    admin: Admin
    # Sessions and the call journal on disk (state_dir).
    durable: Durable
    # Snapshots, forks and restores; their store under state_dir.
    snapshots: Snapshots
    # Exec and files for programs (harnesses, SDKs).
    programs: Programs

    async def start(self, *, reap_expired: bool = True) -> None:
        """Re-adopt a previous run's sessions (in the background) and remove
        its other sandboxes, fill the pool, start the reaper.

        `reap_expired=False` leaves sessions without TTL or idle reaping (the
        in-process MCP front: one session for the life of its connection).
        """
        self.obs.start()
        quiet_exhaustion(asyncio.get_running_loop())
        self.egress.listening_on(self.obs.metrics.port)
        # First: the sessions of a fork a crash cut short are not re-adopted.
        await self.snapshots.start()
        await self.manager.start()
        if reap_expired:
            self.reaper.start()

    async def stop(self) -> None:
        """Stop per `shutdown`: "keep" answers in-flight calls UNAVAILABLE and
        leaves the sessions running for the next start; "close" answers them
        SANDBOX_LOST and closes every session. Then release the backend."""
        await self.reaper.stop()
        await self.snapshots.stop()
        try:
            await self.manager.shutdown(keep=self.config.shutdown == "keep")
        finally:
            self.audit.close()
            self.snapshots.store.close()
            await self.backend.close()
            self.durable.close()
            self.obs.stop()


def default_registry() -> Registry:
    """Every tool: the tools folder's, then those of the layers above it."""
    return Registry([*TOOLS, WORKSPACE_DIFF])


def build_core(
    config: Config,
    backend: SandboxBackend | None = None,
    registry: Registry | None = None,
    clock: Clock = REAL_CLOCK,
) -> Core:
    """The core on `backend` (default: the Docker engine) with `registry`'s
    tools; `clock` times call rates and the pool's demand (tests move it)."""
    # First: a refused secrets_file or state database stops the start
    # before anything else is opened.
    secrets = load_secrets(config.secrets_file)
    # state_dir is resolved here only, and its database opened once: one
    # connection, shared by the durable sessions and the snapshot store
    # (both serialise their transactions on StateDB.lock; see state/db.py).
    state_dir = config.state_dir or default_state_dir(config.instance)
    lock = StateLock.take(state_dir)  # one daemon per state_dir
    try:
        db = StateDB.open(state_dir, [*COMPONENTS, SNAPSHOTS])
    except BaseException:
        lock.release()
        raise
    durable = Durable(db, config, lock)
    if backend is None:
        # Imported here: the Docker SDK is heavy and fronts given a backend never need it.
        from runtime.sandbox.docker.backend import DockerBackend

        backend = DockerBackend(config)
    registry = registry or default_registry()
    obs = Observability(config, registry.names())
    audit = AuditLog(
        config.audit_log,
        network_records=config.shares.audit_network_records,
        pending_bytes=config.shares.audit_pending_bytes,
        refused=obs.metrics.share_refused,
    )

    def ended(session: Session, reason: str) -> None:
        # Kept by the audit log until it can be written; nothing to answer here.
        with contextlib.suppress(AuditUnavailable):
            audit.session("session.close", DAEMON, session.id, tenant=session.tenant, reason=reason)

    egress = Egress(config, refused=obs.metrics.share_refused)

    def network_event(event: EgressEvent) -> None:
        obs.metrics.egress_connection(event.decision)
        owner = next((s for s in manager.live_sessions() if s.id == event.session_id), None)
        if owner is not None:
            # A command can name a host after a secret (`curl $TOKEN.example`).
            redact = owner.redactor.redact_text
            event = replace(event, host=redact(event.host), reason=redact(event.reason))
        log.debug(
            "egress session=%s host=%s port=%d decision=%s in=%d out=%d %s",
            event.session_id,
            event.host[:100],
            event.port,
            event.decision,
            event.bytes_in,
            event.bytes_out,
            event.reason[:200],
        )
        # A connection outlives no answer: a record the log cannot take is
        # dropped here, and the log refuses the next call until it can write.
        with contextlib.suppress(AuditUnavailable):
            audit.network(event)

    egress.on_event = network_event
    manager = SessionManager(config, backend, ended, secrets, egress, obs.metrics, durable, clock)
    obs.metrics.watch(
        lambda: len(manager.live_sessions()), lambda: manager.pool.ready() if manager.pool else 0
    )
    reaper = Reaper(manager.live_sessions, manager.expire, config.reaper_interval_s)
    store = SnapshotStore(
        state_dir,
        config.snapshot_ttl_seconds,
        db,
        reserve_bytes=config.shares.state_reserve_bytes,
        share=config.shares.snapshot_space,
    )
    snapshots = Snapshots(config, manager, store, obs.metrics, durable)
    calls = Calls(config, manager, registry, obs, snapshots)
    # Uploads, downloads and programs' file reads and writes share the slots.
    slots = TransferSlots(config.shares, obs.metrics.share_refused)
    transfers = Transfers(manager, slots)
    admin = Admin(config, backend, manager, obs)
    return Core(
        config,
        backend,
        registry,
        manager,
        calls,
        transfers,
        reaper,
        audit,
        egress,
        obs,
        admin,
        durable,
        snapshots,
        Programs(config, manager, slots, RunningExecs(config.shares, obs.metrics.share_refused)),
    )
