"""Latency samples and the few numbers the report needs."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sample:
    """Latencies (seconds) of one operation, or a throughput run."""

    name: str
    times: list[float] = field(default_factory=list)
    calls_per_s: float = 0.0
    failures: int = 0
    note: str = ""

    @property
    def n(self) -> int:
        return len(self.times)

    def pct(self, q: float) -> float:
        if not self.times:
            return float("nan")
        ordered = sorted(self.times)
        index = min(len(ordered) - 1, round(q * (len(ordered) - 1)))
        return ordered[index]

    @property
    def p50(self) -> float:
        return self.pct(0.50)

    @property
    def p90(self) -> float:
        return self.pct(0.90)

    @property
    def p99(self) -> float:
        return self.pct(0.99)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "n": self.n,
            "p50_ms": self.p50 * 1e3,
            "p90_ms": self.p90 * 1e3,
            "p99_ms": self.p99 * 1e3,
            "calls_per_s": self.calls_per_s,
            "failures": self.failures,
            "note": self.note,
        }


def timed(name: str, n: int, fn: Callable[[], Any], warmup: int = 3) -> Sample:
    """Call `fn` n times (after a few unmeasured calls)."""
    for _ in range(warmup):
        fn()
    sample = Sample(name)
    for _ in range(n):
        started = time.perf_counter()
        fn()
        sample.times.append(time.perf_counter() - started)
    return sample


def interleave(rounds: int, parts: list[tuple[Sample, int, Callable[[], Any]]]) -> None:
    """Round-robin blocks of calls, so that drift in a noisy host's speed
    hits every sample alike and their ratios stay meaningful."""
    for *_, fn in parts:
        fn()  # warm
    for _ in range(rounds):
        for sample, count, fn in parts:
            for _ in range(count):
                started = time.perf_counter()
                fn()
                sample.times.append(time.perf_counter() - started)


def callers(n: int) -> str:
    """How a sample names its callers per session: "1 caller", "8 callers"."""
    return f"{n} caller" + ("" if n == 1 else "s")


def missing(name: str, why: str) -> Sample:
    return Sample(name, note=why)
