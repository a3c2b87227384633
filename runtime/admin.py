"""What operators see: the daemon's state and every tenant's sessions.

Behind the `Admin*` RPCs (an admin principal only; `toolrt status` and
`toolrt top`). It reads what the core keeps anyway — the sessions, the warm
pool, the metrics' counters — and asks the backend two optional questions
(`SandboxBackend.describe_engine`, `usage`): what engine it is and what a
sandbox uses. Backends that cannot answer are described by name, with no usage.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from runtime import __version__
from runtime.config import Config
from runtime.observability import Observability
from runtime.sandbox.backend import (
    NO_USAGE,
    EngineInfo,
    SandboxBackend,
    Usage,
)
from runtime.sessions.manager import SessionManager
from runtime.sessions.pool import ProfileStatus
from runtime.sessions.session import Session

# An engine that does not answer this fast is reported as not answering.
ENGINE_TIMEOUT_S = 5.0
# Usage requests in flight at once (each is one engine request).
USAGE_CONCURRENCY = 8


@dataclass
class Stats:
    version: str
    instance: str
    started_at: float
    uptime_seconds: float
    engine: str
    engine_error: str
    runtime: str
    sessions: dict[str, int]
    max_sessions: int
    created: dict[str, int]
    closed: dict[str, int]
    pool: list[ProfileStatus]
    calls_per_second: float
    calls_total: int
    errors: dict[str, int]

    @property
    def healthy(self) -> bool:
        return not self.engine_error


@dataclass
class SessionView:
    session: Session
    last_used_at: float
    usage: Usage = field(default=NO_USAGE)


class Admin:
    def __init__(
        self,
        config: Config,
        backend: SandboxBackend,
        manager: SessionManager,
        obs: Observability,
    ) -> None:
        self._config = config
        self._backend = backend
        self._manager = manager
        self._obs = obs
        self._started = time.time()

    async def _engine(self) -> tuple[EngineInfo, str]:
        """The engine's description, and why it does not answer ("" when it does)."""
        fallback = EngineInfo(type(self._backend).__name__, self._config.runtime)
        try:
            info = await asyncio.wait_for(self._backend.describe_engine(), ENGINE_TIMEOUT_S)
            return info or fallback, ""
        except TimeoutError:
            return fallback, f"the engine did not answer within {ENGINE_TIMEOUT_S:g} s"
        except Exception as exc:  # noqa: BLE001 - reported, not raised: status must answer
            return fallback, str(exc) or type(exc).__name__

    async def stats(self) -> Stats:
        engine, problem = await self._engine()
        metrics = self._obs.metrics
        states: dict[str, int] = {}
        for session in self._manager.live_sessions():
            states[session.state] = states.get(session.state, 0) + 1
        calls = metrics.totals(metrics.calls, "code")
        pool = self._manager.pool
        return Stats(
            version=__version__,
            instance=self._config.instance,
            started_at=self._started,
            uptime_seconds=time.time() - self._started,
            engine=engine.name,
            engine_error=problem,
            runtime=engine.runtime,
            sessions=states,
            max_sessions=self._config.max_sessions,
            created=_counts(metrics.totals(metrics.sessions_created, "source")),
            closed=_counts(metrics.totals(metrics.sessions_closed, "reason")),
            pool=pool.status() if pool is not None else [],
            calls_per_second=self._obs.call_rate.rate(),
            calls_total=int(sum(calls.values())),
            errors={code: int(n) for code, n in calls.items() if code != "ok" and n},
        )

    async def sessions(self, tenant: str = "", usage: bool = False) -> list[SessionView]:
        """Open sessions of every tenant (or of `tenant`), oldest first."""
        now_wall, now_mono = time.time(), time.monotonic()
        views = [
            SessionView(s, now_wall - (now_mono - s.last_used))
            for s in sorted(self._manager.live_sessions(), key=lambda s: s.created_at)
            if not tenant or s.tenant == tenant
        ]
        if usage:
            reader, gate = self._backend, asyncio.Semaphore(USAGE_CONCURRENCY)

            async def measure(view: SessionView) -> None:
                async with gate:
                    try:
                        view.usage = await asyncio.wait_for(
                            reader.usage(view.session.id), ENGINE_TIMEOUT_S
                        )
                    except Exception:  # noqa: BLE001 - a sandbox closing meanwhile has none
                        view.usage = NO_USAGE

            await asyncio.gather(*(measure(v) for v in views))
        return views


def _counts(totals: dict[str, float]) -> dict[str, int]:
    return {key: int(value) for key, value in totals.items()}
