"""Metrics, traces and JSON logs of a daemon on the fake backend, read the way
operators read them: /metrics scraped over HTTP, spans received by an OTLP/HTTP
endpoint in the test, log lines parsed one by one."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.agent import protocol
from runtime.client import Client, ToolrtRpcError
from runtime.errors import ConfigurationError
from runtime.observability.logs import JsonFormatter, configure_logging
from runtime.observability.metrics import Metrics

SECRET = "s3cr3t-payload-7d1f"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


# -- metrics -----------------------------------------------------------------------
def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_metrics_count_a_scripted_workload(make_daemon):
    running = make_daemon(backend="fake", metrics_listen="127.0.0.1:0")
    port = running.daemon.core.obs.metrics.port
    assert port
    with Client(running.target) as client:
        with client.session() as s:
            for _ in range(3):
                assert s.shell("true").ok
            assert s.call("read_file", {"path": "/workspace/none"}).error_code == "NOT_FOUND"
            assert s.call("browser", {}).error_code == "UNKNOWN_TOOL"
            assert s.call("shell", '{"command": 5}').error_code == "INVALID_ARGUMENTS"
            batch = [pb.ToolCall(id=f"b{i}", name="list_files", arguments_json="{}") for i in "12"]
            client.stub.ExecuteBatch(pb.ExecuteBatchRequest(session_id=s.id, calls=batch))
            # A repeated call id is answered by the journal: no second call.
            s.call("shell", {"command": "true"}, call_id="same")
            s.call("shell", {"command": "true"}, call_id="same")
        kept = client.create_session()
        samples = scrape(port)
        assert value(samples, "toolrt_sessions_live") == 1
    with Client(running.target, token="not-a-token") as stranger:
        with pytest.raises(ToolrtRpcError) as refused:
            stranger.list_sessions()
        assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED

    samples = scrape(port)
    calls = {
        ("shell", "ok"): 4,
        ("read_file", "NOT_FOUND"): 1,
        ("unknown", "UNKNOWN_TOOL"): 1,
        ("shell", "INVALID_ARGUMENTS"): 1,
        ("list_files", "ok"): 2,
    }
    for (tool, code), count in calls.items():
        assert value(samples, "toolrt_calls_total", tool=tool, code=code) == count, (tool, code)
    counted = {
        labels: v for (name, labels), v in samples.items() if name == "toolrt_calls_total" and v
    }
    assert len(counted) == len(calls)
    durations = {"shell": 5, "read_file": 1, "unknown": 1, "list_files": 2}
    for tool, count in durations.items():
        assert value(samples, "toolrt_call_duration_seconds_count", tool=tool) == count
        assert value(samples, "toolrt_call_duration_seconds_bucket", tool=tool, le="+Inf") == count
    assert value(samples, "toolrt_sessions_created_total", source="cold") == 2
    assert value(samples, "toolrt_sessions_created_total", source="pool") == 0
    assert value(samples, "toolrt_session_create_seconds_count", source="cold") == 2
    assert value(samples, "toolrt_sessions_closed_total", reason="closed") == 1
    assert value(samples, "toolrt_sessions_live") == 1
    assert value(samples, "toolrt_pool_ready") == 0
    assert value(samples, "toolrt_auth_failures_total") == 1
    # Labels are low-cardinality: never a session or call id.
    labels = {v for (_, pairs) in samples for _, v in pairs}
    assert not {s.id, kept.id, "same", "b1"} & labels

    with Client(running.target) as client:
        client.close_session(kept.id)
    assert value(scrape(port), "toolrt_sessions_live") == 0


def test_metrics_are_not_served_unless_asked(make_daemon):
    running = make_daemon(backend="fake")
    assert running.daemon.core.obs.metrics.port == 0
    taken = running.daemon.port  # the gRPC listener's
    for listen, says in (
        (f"127.0.0.1:{taken}", "cannot serve metrics there"),
        ("9464", "HOST:PORT"),
    ):
        with pytest.raises(ConfigurationError, match=says):
            Metrics([]).serve(listen)


# -- traces ------------------------------------------------------------------------
class Receiver:
    """An OTLP/HTTP traces endpoint on 127.0.0.1: the spans it was sent."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.paths.append(self.path)
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        receiver.spans.extend(scope.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def attributes(span: Any) -> dict[str, str]:
    return {a.key: a.value.string_value for a in span.attributes}


def test_spans_carry_call_ids_and_continue_the_callers_trace(make_daemon, receiver):
    running = make_daemon(backend="fake", otel_endpoint=receiver.url)
    traceparent = (("traceparent", f"00-{TRACE_ID}-{PARENT_ID}-01"),)
    with Client(running.target) as client, client.session() as s:
        call = pb.ToolCall(id="call-one", name="shell", arguments_json='{"command": "true"}')
        client.stub.Execute(pb.ExecuteRequest(session_id=s.id, call=call), metadata=traceparent)
        batch = [
            pb.ToolCall(id="call-two", name="list_files", arguments_json="{}"),
            pb.ToolCall(id="call-three", name="read_file", arguments_json='{"path": "nope"}'),
        ]
        client.stub.ExecuteBatch(pb.ExecuteBatchRequest(session_id=s.id, calls=batch))
    running.daemon.core.obs.tracer.flush()

    assert set(receiver.paths) == {"/v1/traces"}
    by_name: dict[str, list[Any]] = {}
    for span in receiver.spans:
        by_name.setdefault(span.name, []).append(span)
    (execute,) = by_name["toolruntime.v1.ToolRuntime/Execute"]
    assert execute.trace_id.hex() == TRACE_ID
    assert execute.parent_span_id.hex() == PARENT_ID
    assert attributes(execute)["toolrt.session_id"] == s.id
    assert attributes(execute)["rpc.method"] == "Execute"
    (batch_span,) = by_name["toolruntime.v1.ToolRuntime/ExecuteBatch"]
    assert batch_span.trace_id.hex() != TRACE_ID  # no traceparent: a trace of its own
    assert "toolruntime.v1.ToolRuntime/CreateSession" in by_name

    calls = {attributes(span)["toolrt.call_id"]: span for span in by_name["toolrt.call"]}
    assert set(calls) == {"call-one", "call-two", "call-three"}
    assert calls["call-one"].parent_span_id == execute.span_id
    assert calls["call-one"].trace_id.hex() == TRACE_ID
    for call_id in ("call-two", "call-three"):
        assert calls[call_id].parent_span_id == batch_span.span_id
    assert attributes(calls["call-one"]) == {
        "toolrt.session_id": s.id,
        "toolrt.call_id": "call-one",
        "toolrt.tool": "shell",
        "toolrt.tenant": "default",
        "toolrt.error_code": "",
    }
    assert attributes(calls["call-three"])["toolrt.error_code"] == "NOT_FOUND"
    assert calls["call-three"].status.message == "NOT_FOUND"


def test_refused_rpcs_are_traced_with_their_status(make_daemon, receiver):
    running = make_daemon(backend="fake", otel_endpoint=receiver.url)
    with Client(running.target) as client:
        with pytest.raises(ToolrtRpcError):
            client.get_session("nope")
    running.daemon.core.obs.tracer.flush()
    (span,) = [s for s in receiver.spans if s.name.endswith("/GetSession")]
    assert span.status.message == "NOT_FOUND"
    assert attributes(span)["toolrt.session_id"] == "nope"


NO_SDK_WHEN_OFF = """
import asyncio, sys
from runtime.config import Config
from runtime.core import build_core
from runtime.sandbox.fake import FakeBackend
from runtime.server.app import Daemon

async def main():
    config = Config(listen="127.0.0.1:0", pool_size=0, state_dir=sys.argv[1], shutdown="close")
    daemon = Daemon(build_core(config, backend=FakeBackend()))
    await daemon.start()
    await daemon.stop()

asyncio.run(main())
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
print(loaded)
sys.exit(1 if loaded else 0)
"""


def test_tracing_off_imports_no_opentelemetry(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", NO_SDK_WHEN_OFF, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# -- logs --------------------------------------------------------------------------
@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """The daemon's log records as JSON lines, at INFO."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("runtime")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield stream
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_json_logs_carry_ids_and_never_arguments_or_outputs(make_daemon, json_log):
    running = make_daemon(backend="fake")

    def echo(request: protocol.Exec) -> Any:
        return protocol.ExecResult(exit_code=0), f"{SECRET}-out\n".encode()

    running.daemon.core.backend.script(echo)
    with Client(running.target) as client, client.session() as s:
        assert s.call("shell", {"command": f"echo {SECRET}"}, call_id="c-1").ok
        s.call("write_file", {"path": "f.txt", "content": SECRET}, call_id="c-2")
        s.call("shell", '{"command": 5, "x": "' + SECRET + '"}', call_id="c-3")

    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    assert lines and all({"ts", "level", "logger", "message"} <= set(e) for e in lines)
    assert SECRET not in json_log.getvalue()
    calls = [e for e in lines if e["message"].startswith("call ")]
    assert [e["call_id"] for e in calls] == ["c-1", "c-2", "c-3"]
    assert {e["session_id"] for e in calls} == {s.id}
    created = [e for e in lines if e["message"].startswith(f"session {s.id} created")]
    closed = [e for e in lines if e["message"] == f"session {s.id} closed"]
    assert created[0]["session_id"] == closed[0]["session_id"] == s.id
    assert "call_id" not in closed[0]


def test_configure_logging_writes_one_object_a_line():
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("info", "json", stream)
        logging.getLogger("runtime.test").info("hello %s", "there", extra={"session_id": "s1"})
        logging.getLogger("runtime.test").debug("not at INFO")
        configure_logging("INFO", "text", stream)
        logging.getLogger("runtime.test").warning("plain")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    first, second = stream.getvalue().splitlines()
    entry = json.loads(first)
    assert entry["message"] == "hello there" and entry["session_id"] == "s1"
    assert entry["level"] == "INFO" and entry["logger"] == "runtime.test"
    assert second.endswith("WARNING runtime.test: plain")
