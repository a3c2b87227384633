"""The warm pool: sandboxes started before anyone asks, one session each.

Per profile (image, tmpfs sizes, OCI runtime), `pool_size`
containers are created in the background and kept ready. CreateSession
claims one when its request matches a profile: the container was created
with its future session id in `toolrt.session` (labels cannot change), so
the claim hands out that id; memory, cpus and pids are set at claim time
(Docker can change them on a live container). A claimed container belongs
to its session and is destroyed with it, never returned. Each claim starts
a refill. Fills never exceed the pool's size: after a failure (engine down,
image missing) one fill at a time retries with a growing delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from runtime.config import Config, Limits, PoolProfile
from runtime.sandbox.backend import Sandbox, SandboxBackend, SandboxSpec

log = logging.getLogger(__name__)

# Labels are fixed at creation: a warm container belongs to no tenant (it
# carries no toolrt.tenant) and serves any; the daemon records the owner of
# the session that claims it. Requests with labels of their own are served cold.
POOL_TENANT = ""
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0


@runtime_checkable
class LimitUpdater(Protocol):
    async def update_limits(self, sandbox_id: str, limits: Limits) -> None: ...


@dataclass(frozen=True)
class ProfileKey:
    image: str
    workspace_bytes: int
    tmp_bytes: int
    runtime: str = ""


@dataclass
class Warm:
    """A ready sandbox and the session id it was created for."""

    session_id: str
    sandbox: Sandbox
    limits: Limits


def _key(image: str, limits: Limits, runtime: str) -> ProfileKey:
    return ProfileKey(image, limits.workspace_bytes, limits.tmp_bytes, runtime)


def _runtime_limits_equal(a: Limits, b: Limits) -> bool:
    return (a.memory_bytes, a.cpus, a.pids) == (b.memory_bytes, b.cpus, b.pids)


class WarmPool:
    def __init__(
        self,
        config: Config,
        backend: SandboxBackend,
        before_create: Callable[[], Awaitable[None]],
        has_room: Callable[[], bool],
    ) -> None:
        self._config = config
        self._backend = backend
        self._before_create = before_create
        self._has_room = has_room
        self._size = config.pool_size
        self._ready: dict[ProfileKey, deque[Warm]] = {}
        self._filling: dict[ProfileKey, int] = {}
        self._failures: dict[ProfileKey, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = asyncio.Event()
        for profile in config.pool_profiles or [PoolProfile()]:
            key = ProfileKey(
                image=profile.image or config.image,
                workspace_bytes=profile.workspace_bytes or config.defaults.workspace_bytes,
                tmp_bytes=profile.tmp_bytes or config.defaults.tmp_bytes,
                runtime=profile.runtime or config.runtime,
            )
            self._ready[key] = deque()
            self._filling[key] = 0
            self._failures[key] = 0

    # -- counting -----------------------------------------------------------
    def count(self) -> int:
        """Containers the pool holds or is creating (they count as sessions)."""
        return sum(len(q) for q in self._ready.values()) + sum(self._filling.values())

    def ready(self, key: ProfileKey | None = None) -> int:
        if key is not None:
            return len(self._ready.get(key, ()))
        return sum(len(q) for q in self._ready.values())

    def can_serve(self, image: str, limits: Limits, labels: dict[str, str], runtime: str) -> bool:
        return self._match(image, limits, labels, runtime) is not None

    def _match(
        self, image: str, limits: Limits, labels: dict[str, str], runtime: str
    ) -> deque[Warm] | None:
        if any(not k.startswith("toolrt.") for k in labels):
            return None
        queue = self._ready.get(_key(image, limits, runtime))
        return queue or None

    # -- filling ------------------------------------------------------------
    def start(self) -> None:
        """Fill every profile up to its size (as room allows); also after a close."""
        for key in self._ready:
            self._refill(key)

    def _refill(self, key: ProfileKey) -> None:
        while (
            not self._closing.is_set()
            and len(self._ready[key]) + self._filling[key] < self._size
            # After a failure, a single fill probes until one succeeds.
            and (self._failures[key] == 0 or self._filling[key] == 0)
            and self._has_room()
        ):
            self._filling[key] += 1
            task = asyncio.create_task(self._fill(key), name=f"pool-fill-{key.image}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _limits(self, key: ProfileKey) -> Limits:
        return self._config.defaults.model_copy(
            update={"workspace_bytes": key.workspace_bytes, "tmp_bytes": key.tmp_bytes}
        )

    async def _fill(self, key: ProfileKey) -> None:
        try:
            failures = self._failures[key]
            if failures:
                delay = min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (failures - 1))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), delay)
            if self._closing.is_set():
                return
            spec = SandboxSpec(
                session_id=uuid.uuid4().hex,
                image=key.image,
                limits=self._limits(key),
                tenant=POOL_TENANT,
                runtime=key.runtime,
            )
            try:
                await self._before_create()
                sandbox = await self._backend.create(spec)
            except Exception as exc:  # noqa: BLE001 - logged; the pool retries later
                self._failures[key] += 1
                log.warning("warm pool: cannot create a %s sandbox: %s", key.image, exc)
                return
            self._failures[key] = 0
            if self._closing.is_set():
                await self._backend.destroy(spec.session_id)
                return
            self._ready[key].append(Warm(spec.session_id, sandbox, spec.limits))
            log.debug("warm pool: sandbox %s ready (%s)", spec.session_id, key.image)
        finally:
            self._filling[key] -= 1
            self._refill(key)

    # -- claiming -----------------------------------------------------------
    async def claim(
        self, image: str, limits: Limits, labels: dict[str, str], runtime: str
    ) -> Warm | None:
        """A ready sandbox set to `limits`, or None (then serve cold)."""
        queue = self._match(image, limits, labels, runtime)
        while queue:
            warm = queue.popleft()
            self._refill(_key(image, limits, runtime))
            if warm.sandbox.lost:
                self._discard(warm, warm.sandbox.lost)
                continue
            if not _runtime_limits_equal(warm.limits, limits):
                if not isinstance(self._backend, LimitUpdater):
                    self._discard(warm, "the backend cannot change limits")
                    return None
                try:
                    await self._backend.update_limits(warm.session_id, limits)
                except Exception as exc:  # noqa: BLE001 - the caller is served cold
                    self._discard(warm, f"setting its limits failed: {exc}")
                    return None
            return Warm(warm.session_id, warm.sandbox, limits)
        return None

    def _discard(self, warm: Warm, reason: str) -> None:
        log.warning("warm pool: dropping sandbox %s: %s", warm.session_id, reason)
        task = asyncio.create_task(self._backend.destroy(warm.session_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    # -- shutdown -----------------------------------------------------------
    async def close(self) -> None:
        """Stop filling and destroy every ready sandbox."""
        self._closing.set()
        if self._tasks:
            # Fills finish (and remove what they created) rather than being
            # cancelled mid-create, which could leave a container behind.
            timeout = self._config.create_timeout_s + self._config.docker_timeout_s
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
        ready = [warm for queue in self._ready.values() for warm in queue]
        for queue in self._ready.values():
            queue.clear()
        await asyncio.gather(
            *(self._backend.destroy(w.session_id) for w in ready), return_exceptions=True
        )
