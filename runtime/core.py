"""The one composition root: `build_core(config)` wires backend, tools and sessions.

Every front builds on it (the gRPC daemon in `server.app`, `toolrt mcp`, the
tests), so each gets the same wiring; none constructs a backend or a
session manager itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.config import Config
from runtime.egress.service import Egress
from runtime.sandbox.backend import SandboxBackend
from runtime.sessions.calls import Calls
from runtime.sessions.manager import SessionManager
from runtime.sessions.reaper import Reaper
from runtime.sessions.transfers import Transfers
from runtime.tools.registry import Registry, default_registry


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
    # Sessions' network proxies; fronts set `egress.on_event` (audit, metrics).
    egress: Egress

    async def start(self, *, reap_expired: bool = True) -> None:
        """Reap a previous run's sandboxes, fill the pool, start the reaper.

        `reap_expired=False` leaves sessions without TTL or idle reaping (the
        in-process MCP front: one session for the life of its connection).
        """
        await self.manager.start()
        if reap_expired:
            self.reaper.start()

    async def stop(self) -> None:
        """Answer in-flight calls (SANDBOX_LOST), close every session, release the backend."""
        await self.reaper.stop()
        try:
            await self.manager.shutdown()
        finally:
            await self.backend.close()


def build_core(
    config: Config, backend: SandboxBackend | None = None, registry: Registry | None = None
) -> Core:
    """The core on `backend` (default: the Docker engine) with `registry`'s tools."""
    if backend is None:
        # Imported here: the Docker SDK is heavy and fronts given a backend never need it.
        from runtime.sandbox.docker.backend import DockerBackend

        backend = DockerBackend(config)
    registry = registry or default_registry()
    egress = Egress(config)
    manager = SessionManager(config, backend, egress)
    reaper = Reaper(manager.live_sessions, manager.expire, config.reaper_interval_s)
    calls = Calls(config, manager, registry)
    return Core(config, backend, registry, manager, calls, Transfers(manager), reaper, egress)
