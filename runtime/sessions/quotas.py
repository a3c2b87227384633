"""Per-tenant ceilings (`[tenants.NAME]`): what a tenant may use, how much, how fast.

Permissions (images, runtimes) are PERMISSION_DENIED; counts and sums over
live sessions (sessions, memory, cpus) and the call rate are
RESOURCE_EXHAUSTED naming the quota — for the rate, with the wait. A tenant
without a table gets `[tenants.default]` when there is one; with no tables
at all nothing here limits anybody. The rate is a token bucket per tenant,
so one tenant's flood spends only its own tokens.

A tenant calling again before the time its last refusal named (a client
that ignores refusals, or many callers of one tenant) is held until that
time and judged then, instead of being refused at once: answering a refusal
costs the daemon as much CPU as a small call, and a client that retries on
every refusal would otherwise turn its quota into a stream of refusals as
fast as the host can answer them, slowing every other tenant. Held, such a
client gets one answer per wait. The holding is bounded (MAX_HELD calls per
tenant, MAX_HOLD_S each), so a flood that does not wait for answers cannot
pile up held calls; beyond that, refusals are immediate again.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass

from runtime.clock import REAL_CLOCK, Clock
from runtime.config import Config, Limits, TenantQuota
from runtime.errors import AdmissionRefused, PermissionDenied, RateLimited


@dataclass
class Usage:
    """What a tenant's live (and being-created) sessions hold."""

    sessions: int = 0
    memory_bytes: int = 0
    cpus: float = 0.0


# Calls of one tenant held at once, and the longest any is held (see above).
MAX_HELD = 256
MAX_HOLD_S = 1.0


@dataclass
class Bucket:
    tokens: float
    at: float
    burst: int = 1
    # When the latest refusal said the tenant could call again, and how many
    # of its calls wait for that time now.
    told: float = 0.0
    held: int = 0


class TenantQuotas:
    """Admission and rate checks of every tenant, by the config's `[tenants]` tables."""

    def __init__(self, config: Config, clock: Clock = REAL_CLOCK) -> None:
        self._config = config
        self._clock = clock
        self._usage: dict[str, Usage] = {}
        self._buckets: dict[str, Bucket] = {}

    def usage(self, tenant: str) -> Usage:
        return self._usage.get(tenant, Usage())

    def admit(self, tenant: str, image: str, runtime: str, limits: Limits) -> None:
        """Reserve a new session's share, or refuse it; `release` gives it back."""
        quota = self._config.quota_of(tenant)
        if quota is not None:
            self._check_permissions(tenant, quota, image, runtime)
            self._check_room(tenant, quota, limits)
        usage = self._usage.setdefault(tenant, Usage())
        usage.sessions += 1
        usage.memory_bytes += limits.memory_bytes
        usage.cpus += limits.cpus

    def count(self, tenant: str, limits: Limits) -> None:
        """Count a re-adopted session's share without checking it: it was
        admitted by the previous run, and closing it releases it."""
        usage = self._usage.setdefault(tenant, Usage())
        usage.sessions += 1
        usage.memory_bytes += limits.memory_bytes
        usage.cpus += limits.cpus

    def check_secrets(self, tenant: str, names: list[str]) -> None:
        """PERMISSION_DENIED for a secret name outside the tenant's `secrets` (the seam
        for sessions with secrets: CreateSession calls it once requests carry names)."""
        quota = self._config.quota_of(tenant)
        if quota is None or quota.secrets is None:
            return
        refused = [name for name in names if name not in quota.secrets]
        if refused:
            allowed = ", ".join(quota.secrets) or "none"
            asked = ", ".join(refused)
            msg = f"tenant {tenant} may not use secret(s) {asked}; its secrets: {allowed}"
            raise PermissionDenied(msg)

    def release(self, tenant: str, limits: Limits) -> None:
        usage = self._usage.get(tenant)
        if usage is None:
            return
        usage.sessions -= 1
        usage.memory_bytes -= limits.memory_bytes
        usage.cpus -= limits.cpus
        if usage.sessions <= 0:
            del self._usage[tenant]

    @staticmethod
    def _check_permissions(tenant: str, quota: TenantQuota, image: str, runtime: str) -> None:
        if quota.images is not None and not any(
            fnmatch.fnmatchcase(image, p) for p in quota.images
        ):
            allowed = ", ".join(quota.images) or "none"
            msg = f"tenant {tenant} may not use image {image!r}; its images: {allowed}"
            raise PermissionDenied(msg)
        if quota.runtimes is not None and runtime not in quota.runtimes:
            allowed = ", ".join(repr(r) for r in quota.runtimes) or "none"
            msg = f"tenant {tenant} may not use runtime {runtime!r}; its runtimes: {allowed}"
            raise PermissionDenied(msg)

    def _check_room(self, tenant: str, quota: TenantQuota, limits: Limits) -> None:
        usage = self.usage(tenant)
        if quota.max_sessions is not None and usage.sessions + 1 > quota.max_sessions:
            msg = (
                f"tenant {tenant} has {usage.sessions} live session(s), its max_sessions "
                f"quota is {quota.max_sessions}; close one first"
            )
            raise AdmissionRefused(msg)
        checks = [
            ("max_memory_bytes", quota.max_memory_bytes, usage.memory_bytes, limits.memory_bytes),
            ("max_cpus", quota.max_cpus, usage.cpus, limits.cpus),
        ]
        for name, ceiling, used, asked in checks:
            if ceiling is not None and used + asked > ceiling:
                msg = (
                    f"tenant {tenant}'s live sessions hold {used:g} and this one asks "
                    f"{asked:g}; its {name} quota is {ceiling:g}: ask for less or close a session"
                )
                raise AdmissionRefused(msg)

    def held(self, tenant: str) -> int:
        """How many of the tenant's calls wait for the time a refusal named."""
        bucket = self._buckets.get(tenant)
        return bucket.held if bucket else 0

    async def take_calls(self, tenant: str, count: int = 1) -> None:
        """`spend_calls`, judged no earlier than the time the tenant's last refusal named."""
        bucket = self._buckets.get(tenant)
        # A batch larger than the burst never fits: refused at once.
        if bucket is not None and bucket.held < MAX_HELD and count <= bucket.burst:
            early = bucket.told - self._clock.monotonic()
            if early > 0:
                bucket.held += 1
                try:
                    # A microsecond over, so that the named time's token is
                    # there despite the rounding of the clock's floats.
                    await self._clock.sleep(min(early + 1e-6, MAX_HOLD_S))
                finally:
                    bucket.held -= 1
        self.spend_calls(tenant, count)

    def spend_calls(self, tenant: str, count: int = 1) -> None:
        """Take `count` calls from the tenant's rate, or refuse saying how long to wait."""
        quota = self._config.quota_of(tenant)
        if quota is None or quota.calls_per_second is None:
            return
        rate = quota.calls_per_second
        burst = quota.burst or max(1, math.ceil(rate))
        now = self._clock.monotonic()
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = Bucket(float(burst), now, burst)
        bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.at) * rate)
        bucket.at = now
        if count > burst:
            msg = (
                f"a batch of {count} calls exceeds tenant {tenant}'s burst of {burst} "
                f"(calls_per_second {rate:g}): send at most {burst} calls at once"
            )
            raise RateLimited(msg, math.inf)
        if bucket.tokens < count:
            wait = (count - bucket.tokens) / rate
            bucket.told = max(bucket.told, now + wait)
            msg = (
                f"tenant {tenant} is over its calls_per_second quota ({rate:g}, burst {burst}); "
                f"retry in {wait:.3f} s"
            )
            raise RateLimited(msg, wait)
        bucket.tokens -= count
