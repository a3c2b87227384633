"""The warm pool: sandboxes started before anyone asks, one session each.

Per profile (image, tmpfs sizes, OCI runtime), containers
are created in the background and kept ready. CreateSession claims one when
its request matches a profile: the container was created with its future
session id in `toolrt.session` (labels cannot change), so the claim hands
out that id; memory, cpus and pids are set at claim time (Docker can change
them on a live container). A claimed container belongs to its session and
is destroyed with it, never returned.

How many: each profile aims at as many ready containers as sessions asked
for it in its busiest second of the last `pool_window_s` seconds, at least
`pool_min` and at most `pool_size`. A burst raises the aim at once (the
claims that found the pool empty count too); once a whole window has passed
without such a burst the aim falls and a tick removes the surplus, oldest
first. Fills stop while the daemon has no room (`max_sessions`, the memory
floor), and a request the pool cannot serve takes a ready container's
slot when the daemon is full. After a failure (engine down, image missing)
one fill at a time retries with a growing delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from runtime.config import Config, Limits, PoolProfile
from runtime.constants import client_label
from runtime.observability.window import PerSecond
from runtime.sandbox.backend import NotOffered, Sandbox, SandboxBackend, SandboxSpec

log = logging.getLogger(__name__)

# Labels are fixed at creation: a warm container belongs to no tenant (it
# carries no toolrt.tenant) and serves any; the daemon records the owner of
# the session that claims it. Requests with labels of their own are served cold.
POOL_TENANT = ""
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0
# How often the pool trims its surplus and tops itself up.
TICK_S = 1.0
# Containers one profile creates at once: a burst's cold creates and the
# fills behind it share one engine.
MAX_FILLING = 4


@dataclass(frozen=True)
class ProfileKey:
    image: str
    workspace_bytes: int
    tmp_bytes: int
    runtime: str = ""


@dataclass(frozen=True)
class ProfileStatus:
    """One profile's state, for AdminStats."""

    image: str
    workspace_bytes: int
    tmp_bytes: int
    ready: int
    filling: int
    target: int


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._backend = backend
        self._before_create = before_create
        self._has_room = has_room
        self._ceiling = config.pool_size
        self._floor = min(config.pool_min, config.pool_size)
        self._ready: dict[ProfileKey, deque[Warm]] = {}
        self._filling: dict[ProfileKey, int] = {}
        # Containers still being created that a session took the slot of:
        # each is destroyed as its create ends (see yield_filling).
        self._yielded: dict[ProfileKey, int] = {}
        self._failures: dict[ProfileKey, int] = {}
        self._demand: dict[ProfileKey, PerSecond] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._ticker: asyncio.Task[None] | None = None
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
            self._yielded[key] = 0
            self._failures[key] = 0
            self._demand[key] = PerSecond(config.pool_window_s, clock)

    # -- counting -----------------------------------------------------------
    def count(self) -> int:
        """Containers the pool holds or is creating for itself (they count as
        sessions; one given up to a session no longer does)."""
        ready = sum(len(q) for q in self._ready.values())
        return ready + sum(self._filling.values()) - sum(self._yielded.values())

    def ready(self, key: ProfileKey | None = None) -> int:
        if key is not None:
            return len(self._ready.get(key, ()))
        return sum(len(q) for q in self._ready.values())

    def target(self, key: ProfileKey) -> int:
        """Ready containers `key` aims at: its recent peak demand, within floor and ceiling."""
        return min(self._ceiling, max(self._floor, self._demand[key].peak()))

    def status(self) -> list[ProfileStatus]:
        return [
            ProfileStatus(
                key.image,
                key.workspace_bytes,
                key.tmp_bytes,
                len(queue),
                self._filling[key],
                self.target(key),
            )
            for key, queue in self._ready.items()
        ]

    def can_serve(self, image: str, limits: Limits, labels: dict[str, str], runtime: str) -> bool:
        key = self._profile_of(image, limits, labels, runtime)
        return key is not None and bool(self._ready[key])

    def _profile_of(
        self, image: str, limits: Limits, labels: dict[str, str], runtime: str
    ) -> ProfileKey | None:
        if any(client_label(k) for k in labels):  # fixed at creation: served cold
            return None
        key = _key(image, limits, runtime)
        return key if key in self._ready else None

    # -- filling ------------------------------------------------------------
    def start(self) -> None:
        """Fill every profile up to its aim (as room allows); also after a close."""
        for key in self._ready:
            self._refill(key)
        if self._ticker is None and not self._closing.is_set():
            self._ticker = asyncio.create_task(self._tick(), name="pool-tick")

    async def _tick(self) -> None:
        while not self._closing.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), TICK_S)
            for key in self._ready:
                self._shrink(key)
                self._refill(key)

    def _shrink(self, key: ProfileKey) -> None:
        queue, target = self._ready[key], self.target(key)
        while len(queue) > target and not self._closing.is_set():
            warm = queue.popleft()  # the oldest
            log.debug("warm pool: %s is idle beyond %d ready: removing one", key.image, target)
            self._destroy(warm)

    def _refill(self, key: ProfileKey) -> None:
        while (
            not self._closing.is_set()
            and len(self._ready[key]) + self._filling[key] - self._yielded[key] < self.target(key)
            and self._filling[key] < MAX_FILLING
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
                self._take_yield(key)
                log.warning("warm pool: cannot create a %s sandbox: %s", key.image, exc)
                return
            self._failures[key] = 0
            if self._closing.is_set() or self._take_yield(key):
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
        """A ready sandbox set to `limits`, or None (then serve cold).

        Every request of a profile counts as its demand, served warm or not.
        """
        key = self._profile_of(image, limits, labels, runtime)
        if key is None:
            return None
        self._demand[key].note()
        queue = self._ready[key]
        self._refill(key)
        while queue:
            warm = queue.popleft()
            self._refill(key)
            if warm.sandbox.lost:
                self._discard(warm, warm.sandbox.lost)
                continue
            if not _runtime_limits_equal(warm.limits, limits):
                try:
                    await self._backend.update_limits(warm.session_id, limits)
                except NotOffered as exc:
                    self._discard(warm, str(exc))
                    return None
                except Exception as exc:  # noqa: BLE001 - the caller is served cold
                    self._discard(warm, f"setting its limits failed: {exc}")
                    return None
            return Warm(warm.session_id, warm.sandbox, limits)
        return None

    def evict(self) -> bool:
        """Remove one ready container so that a session can have its slot."""
        queue = max(self._ready.values(), key=len, default=None)
        if not queue:
            return False
        warm = queue.popleft()
        log.info("warm pool: removing sandbox %s to make room for a session", warm.session_id)
        self._destroy(warm)
        return True

    def yield_filling(self) -> bool:
        """Give up a container still being created so that a session can have
        its slot now (it is destroyed as its create ends: for that moment the
        daemon holds one container over max_sessions); whether there was one."""
        for key, filling in self._filling.items():
            if filling > self._yielded[key]:
                self._yielded[key] += 1
                log.info("warm pool: giving up a sandbox being created to make room for a session")
                return True
        return False

    def _take_yield(self, key: ProfileKey) -> bool:
        """Whether the create that just ended was given up (and now is)."""
        if self._yielded[key] > 0:
            self._yielded[key] -= 1
            return True
        return False

    def _discard(self, warm: Warm, reason: str) -> None:
        log.warning("warm pool: dropping sandbox %s: %s", warm.session_id, reason)
        self._destroy(warm)

    def _destroy(self, warm: Warm) -> None:
        task = asyncio.create_task(self._backend.destroy(warm.session_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    # -- shutdown -----------------------------------------------------------
    async def close(self) -> None:
        """Stop filling and destroy every ready sandbox."""
        self._closing.set()
        if self._ticker is not None:
            await self._ticker
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
