"""Traces: a span per RPC and a child span per tool call, sent over OTLP/HTTP.

With `otel_endpoint` empty the daemon gets `NO_TRACER`, whose spans are one
shared object that does nothing: no OpenTelemetry module is even imported.
With it set, `OtelTracer` keeps a tracer provider of the daemon's own (not
the process-wide one, so daemons in one process do not mix), batches spans
to `<otel_endpoint>/v1/traces`, and continues a caller's trace from its W3C
`traceparent` (and `tracestate`) metadata.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from runtime import __version__

# Span attributes DESIGN fixes.
SESSION_ID = "toolrt.session_id"
CALL_ID = "toolrt.call_id"
TOOL = "toolrt.tool"
TENANT = "toolrt.tenant"
ERROR_CODE = "toolrt.error_code"
CALL_SPAN = "toolrt.call"
TRACE_HEADERS = ("traceparent", "tracestate")
EXPORT_TIMEOUT_S = 5


class Span(Protocol):
    def set(self, key: str, value: str) -> None: ...

    def fail(self, description: str) -> None:
        """Mark the span as failed (a status code, a tool error code)."""
        ...


class Tracer(Protocol):
    def rpc(self, method: str, metadata: Sequence[tuple[str, Any]]) -> Any:
        """A context manager: the span of one RPC (`/package.Service/Method`)."""
        ...

    def call(self, attributes: dict[str, str]) -> Any:
        """A context manager: the span of one tool call, a child of its RPC's."""
        ...

    def flush(self) -> None: ...

    def shutdown(self) -> None: ...


class _NoSpan:
    """Every span when tracing is off: entering and leaving it costs a method call."""

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, key: str, value: str) -> None:
        return None

    def fail(self, description: str) -> None:
        return None


class NoTracer:
    _span = _NoSpan()

    def rpc(self, method: str, metadata: Sequence[tuple[str, Any]]) -> _NoSpan:
        return self._span

    def call(self, attributes: dict[str, str]) -> _NoSpan:
        return self._span

    def flush(self) -> None:
        return None

    def shutdown(self) -> None:
        return None


NO_TRACER = NoTracer()


class _OtelSpan:
    def __init__(self, span: Any) -> None:
        self._span = span

    def set(self, key: str, value: str) -> None:
        self._span.set_attribute(key, value)

    def fail(self, description: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._span.set_status(Status(StatusCode.ERROR, description))


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a collector's base URL."""
    base = endpoint.rstrip("/")
    return base if base.endswith("/v1/traces") else f"{base}/v1/traces"


class OtelTracer:
    def __init__(self, endpoint: str, instance: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        resource = Resource.create(
            {
                "service.name": "toolrt",
                "service.version": __version__,
                "service.instance.id": instance,
            }
        )
        self._provider = TracerProvider(resource=resource)
        # A collector that does not answer must not hold a stopping daemon for long.
        exporter = OTLPSpanExporter(endpoint=traces_url(endpoint), timeout=EXPORT_TIMEOUT_S)
        self._provider.add_span_processor(BatchSpanProcessor(exporter))
        self._tracer = self._provider.get_tracer("toolrt", __version__)
        self._propagator = TraceContextTextMapPropagator()
        self._server, self._internal = SpanKind.SERVER, SpanKind.INTERNAL

    @contextlib.contextmanager
    def rpc(self, method: str, metadata: Sequence[tuple[str, Any]]) -> Iterator[_OtelSpan]:
        carrier = {key: value for key, value in metadata if key in TRACE_HEADERS}
        parent = self._propagator.extract(carrier) if carrier else None
        service, _, name = method.lstrip("/").rpartition("/")
        attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}
        # The status is the gRPC code the caller sees (set by `fail`), not the exception's text.
        with self._tracer.start_as_current_span(
            method.lstrip("/"),
            context=parent,
            kind=self._server,
            attributes=attributes,
            set_status_on_exception=False,
        ) as span:
            yield _OtelSpan(span)

    @contextlib.contextmanager
    def call(self, attributes: dict[str, str]) -> Iterator[_OtelSpan]:
        with self._tracer.start_as_current_span(
            CALL_SPAN, kind=self._internal, attributes=attributes
        ) as span:
            yield _OtelSpan(span)

    def flush(self) -> None:
        self._provider.force_flush()

    def shutdown(self) -> None:
        self._provider.shutdown()


def build_tracer(endpoint: str, instance: str) -> Tracer:
    """`OtelTracer` when an endpoint is set, else the tracer that does nothing."""
    return OtelTracer(endpoint, instance) if endpoint else NO_TRACER
