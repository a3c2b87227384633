"""What the daemon tells operators: metrics, traces and structured logs.

`Observability` is the one object the core reports to (`build_core` makes
it): sessions created and closed, each tool call, each RPC. Its parts:
`metrics` (Prometheus, served on `metrics_listen`), `tracing` (OpenTelemetry
over OTLP/HTTP when `otel_endpoint` is set, nothing at all otherwise),
`logs` (text or JSON lines with the ids of the session and call a line is
about); the gRPC interceptor that opens each RPC's span through `rpc` is
the server's (`runtime/server/observing.py`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.config import Config
from runtime.errors import RequestError, Unauthenticated
from runtime.observability.logs import log_context
from runtime.observability.metrics import Metrics
from runtime.observability.tracing import (
    CALL_ID,
    ERROR_CODE,
    SESSION_ID,
    TENANT,
    TOOL,
    build_tracer,
)
from runtime.observability.window import PerSecond

__all__ = ["CallOutcome", "Metrics", "Observability", "log_context"]

CALL_RATE_WINDOW_S = 60.0
# Tool names come from the model: a span attribute keeps a prefix, as the log does.
TOOL_NAME_CHARS = 64


@dataclass
class CallOutcome:
    """Filled in by the call's code: its error code ("" when ok)."""

    code: str = ""


class Observability:
    def __init__(self, config: Config, tools: list[str]) -> None:
        self._config = config
        self.metrics = Metrics(tools)
        self.tracer = build_tracer(config.otel_endpoint, config.instance)
        # Tool calls per second over the last minute (`toolrt status`).
        self.call_rate = PerSecond(CALL_RATE_WINDOW_S)

    @property
    def tracing(self) -> bool:
        """Whether spans are sent anywhere (else the RPC's metadata need not be read)."""
        return bool(self._config.otel_endpoint)

    def start(self) -> None:
        if self._config.metrics_listen:
            self.metrics.serve(self._config.metrics_listen)

    def stop(self) -> None:
        """Stop serving metrics; send the spans still waiting."""
        self.metrics.close()
        self.tracer.shutdown()

    @contextlib.contextmanager
    def rpc(
        self, method: str, metadata: Sequence[tuple[str, Any]], session_id: str = ""
    ) -> Iterator[None]:
        """One RPC: its span (continuing the caller's trace), its log context."""
        with log_context(session_id), self.tracer.rpc(method, metadata) as span:
            if session_id:
                span.set(SESSION_ID, session_id)
            try:
                yield
            except Unauthenticated:
                self.metrics.auth_failed()
                span.fail("UNAUTHENTICATED")
                raise
            except RequestError as exc:
                span.fail(exc.status.name)
                raise
            except Exception:
                span.fail("INTERNAL")
                raise

    @contextlib.contextmanager
    def call(self, session_id: str, tenant: str, call_id: str, tool: str) -> Iterator[CallOutcome]:
        """One tool call: its child span, log context and metrics (time, tool, code)."""
        outcome = CallOutcome()
        started = time.monotonic()
        attributes = {
            SESSION_ID: session_id,
            CALL_ID: call_id,
            TOOL: tool[:TOOL_NAME_CHARS],
            TENANT: tenant,
        }
        with log_context(session_id, call_id), self.tracer.call(attributes) as span:
            yield outcome
            span.set(ERROR_CODE, outcome.code)
            if outcome.code:
                span.fail(outcome.code)
        self.metrics.call_answered(tool, outcome.code, time.monotonic() - started)
        self.call_rate.note()
