"""Prometheus metrics: the names DESIGN fixes, in a registry of each daemon's own.

Labels stay low-cardinality: a tool name (`unknown` outside the catalog),
an error code, a creation source, a close reason, an egress decision, a share —
never a session or call id, a tenant or an image. The counters are always
kept (they are cheap, and `AdminStats` reads them); `metrics_listen` only
decides whether they are also served at `/metrics`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from runtime.errors import ConfigurationError

log = logging.getLogger(__name__)

# Where a session's sandbox came from (`toolrt_sessions_created_total{source}`).
SOURCE_POOL = "pool"
SOURCE_COLD = "cold"
SOURCE_FORK = "fork"
SOURCE_SNAPSHOT = "snapshot"
SOURCES = (SOURCE_POOL, SOURCE_COLD, SOURCE_FORK, SOURCE_SNAPSHOT, "adopted")
# `Session.closed_reason` values (`toolrt_sessions_closed_total{reason}`).
CLOSE_REASONS = ("closed", "ttl", "idle", "sandbox_lost", "shutdown")
OK = "ok"
UNKNOWN_TOOL = "unknown"

# Tool calls run from about a millisecond to an hour (call_timeout_s).
CALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
CALL_BUCKETS_LONG = (60, 120, 300, 900, 3600)
# A warm claim takes milliseconds, a cold start a few hundred.
CREATE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def split_hostport(listen: str) -> tuple[str, int]:
    """ "127.0.0.1:9464" → ("127.0.0.1", 9464); "[::1]:0" → ("::1", 0)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        msg = f"{listen!r}: expected HOST:PORT"
        raise ValueError(msg)
    return host.strip("[]") or "0.0.0.0", int(port)


class Metrics:
    """The daemon's counters, gauges and histograms, and their HTTP endpoint."""

    def __init__(self, tools: list[str]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._tools = frozenset(tools)
        self._server: Any = None
        self.port = 0
        r = self.registry
        self.sessions_live = Gauge("toolrt_sessions_live", "Open sessions.", registry=r)
        self.sessions_created = Counter(
            "toolrt_sessions_created", "Sessions created, by where the sandbox came from.",
            ["source"], registry=r,
        )  # fmt: skip
        self.sessions_closed = Counter(
            "toolrt_sessions_closed", "Sessions closed, by reason.", ["reason"], registry=r
        )
        self.calls = Counter(
            "toolrt_calls", "Tool calls answered, by tool and code.", ["tool", "code"], registry=r
        )
        self.call_seconds = Histogram(
            "toolrt_call_duration_seconds", "Time to answer a tool call.", ["tool"],
            buckets=CALL_BUCKETS + CALL_BUCKETS_LONG, registry=r,
        )  # fmt: skip
        self.create_seconds = Histogram(
            "toolrt_session_create_seconds", "Time to create a session, by source.", ["source"],
            buckets=CREATE_BUCKETS, registry=r,
        )  # fmt: skip
        self.pool_ready = Gauge("toolrt_pool_ready", "Warm containers ready.", registry=r)
        self.egress = Counter(
            "toolrt_egress_connections", "Egress proxy connections, by decision.", ["decision"],
            registry=r,
        )  # fmt: skip
        self.auth_failures = Counter("toolrt_auth_failures", "Refused authentications.", registry=r)
        self.share_refusals = Counter(
            "toolrt_share_refusals",
            "Requests refused because their tenant's share of a resource the tenants "
            "share was full, by share.",
            ["share"], registry=r,
        )  # fmt: skip
        self.snapshot_refusals = Counter(
            "toolrt_snapshot_refusals", "Snapshots refused for space, by the config key that did.",
            ["quota"], registry=r,
        )  # fmt: skip
        for reason in CLOSE_REASONS:
            self.sessions_closed.labels(reason)
        for source in (SOURCE_POOL, SOURCE_COLD):
            self.sessions_created.labels(source)

    # -- recording -------------------------------------------------------------
    def tool_label(self, name: str) -> str:
        """The `tool` label of a call: its name, or `unknown` outside the catalog."""
        return name if name in self._tools else UNKNOWN_TOOL

    def call_answered(self, tool: str, code: str, seconds: float) -> None:
        label = self.tool_label(tool)
        self.calls.labels(label, code or OK).inc()
        self.call_seconds.labels(label).observe(seconds)

    def session_created(self, source: str, seconds: float) -> None:
        self.sessions_created.labels(source).inc()
        self.create_seconds.labels(source).observe(seconds)

    def session_closed(self, reason: str) -> None:
        self.sessions_closed.labels(reason).inc()

    def auth_failed(self) -> None:
        self.auth_failures.inc()

    def share_refused(self, share: str) -> None:
        self.share_refusals.labels(share).inc()

    def snapshot_refused(self, quota: str) -> None:
        self.snapshot_refusals.labels(quota).inc()

    def egress_connection(self, decision: str) -> None:
        self.egress.labels(decision).inc()

    def watch(self, live: Callable[[], int], ready: Callable[[], int]) -> None:
        """Read the two gauges from the daemon at each scrape."""
        self.sessions_live.set_function(live)
        self.pool_ready.set_function(ready)

    # -- reading (AdminStats) --------------------------------------------------
    def totals(self, counter: Counter, label: str) -> dict[str, float]:
        """A counter's totals by one of its labels (summed over the others)."""
        totals: dict[str, float] = {}
        for metric in counter.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    key = sample.labels.get(label, "")
                    totals[key] = totals.get(key, 0.0) + sample.value
        return totals

    # -- serving ---------------------------------------------------------------
    def serve(self, listen: str) -> None:
        """Serve `/metrics` on `listen` (HOST:PORT; port 0 picks one: `self.port`)."""
        try:
            host, port = split_hostport(listen)
            self._server, _ = start_http_server(port, host, registry=self.registry)
        except (ValueError, OSError) as exc:
            msg = f"metrics_listen = {listen!r}: cannot serve metrics there ({exc})"
            raise ConfigurationError(msg) from exc
        self.port = int(self._server.server_port)
        log.info("metrics on http://%s:%d/metrics", host, self.port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
