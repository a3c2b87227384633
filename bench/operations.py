"""Issue 16's measurements: what metrics and tracing cost per call, and the
warm pool at its defaults — the first session's first call, a burst of
creates after an idle spell, a steady rate, and the pool's size meanwhile."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench.ours import Daemon, shell
from bench.stats import Sample, interleave


@contextmanager
def collector() -> Iterator[str]:
    """An OTLP/HTTP endpoint on 127.0.0.1 that accepts span batches and drops them."""

    class Sink(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def observability_cost(instance: str, log_path: str, rounds: int) -> tuple[Sample, Sample]:
    """`shell true` with metrics and tracing off (the default) and on, interleaved."""
    off_sample = Sample("toolrt Execute shell true, metrics and tracing off")
    on_sample = Sample("toolrt Execute shell true, metrics and tracing on")
    with collector() as url:
        settings = {"TOOLRT_METRICS_LISTEN": "127.0.0.1:0", "TOOLRT_OTEL_ENDPOINT": url}
        off = Daemon(f"{instance}-off", 0, log_path)
        try:
            on = Daemon(f"{instance}-on", 0, log_path, settings=settings)
            try:
                with off.client.session() as a, on.client.session() as b:
                    interleave(
                        rounds,
                        [
                            (off_sample, 20, lambda: shell(off.client, a.id, "true")),
                            (on_sample, 20, lambda: shell(on.client, b.id, "true")),
                        ],
                    )
            finally:
                on.stop()
        finally:
            off.stop()
    return off_sample, on_sample


def _ready(d: Daemon) -> int:
    return sum(p.ready for p in d.client.admin_stats().pool)


def _wait_ready(d: Daemon, at_least: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while _ready(d) < at_least:
        if time.monotonic() > deadline:
            msg = f"the pool never had {at_least} ready"
            raise RuntimeError(msg)
        time.sleep(0.05)


def _first_call(d: Daemon) -> tuple[str, float]:
    started = time.perf_counter()
    sid = d.client.create_session().id
    shell(d.client, sid, "true")
    return sid, time.perf_counter() - started


# pool_window_s's default: how long a burst keeps the pool large.
WINDOW_S = 30.0


class PoolWatch:
    """The pool's ready count over time, sampled on a thread of its own."""

    def __init__(self, d: Daemon, every_s: float = 0.25) -> None:
        self.points: list[tuple[float, int]] = []
        self._d, self._every, self._stop = d, every_s, threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.points.append((time.monotonic() - self._started, _ready(self._d)))

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def stop(self) -> list[tuple[float, int]]:
        self._stop.set()
        self._thread.join(10)
        return self.points


def pool_by_default(
    instance: str, log_path: str, firsts: int, burst: int, steady_s: float, rate: float
) -> tuple[list[Sample], str]:
    """The pool at its defaults: samples, and a line telling how its size followed demand."""
    d = Daemon(f"{instance}-pool", None, log_path)
    first = Sample("toolrt warm by default: CreateSession + first Execute")
    burst_sample = Sample(f"toolrt burst of {burst} after idle: create + first Execute")
    steady = Sample(f"toolrt steady {rate:g}/s: create + first Execute")
    ids: list[str] = []
    try:
        for _ in range(firsts):
            _wait_ready(d, 1)
            sid, seconds = _first_call(d)
            first.times.append(seconds)
            d.client.close_session(sid)
        _wait_ready(d, 1)
        time.sleep(2)  # idle
        created = dict(d.client.admin_stats().sessions_created)
        watch = PoolWatch(d)
        with ThreadPoolExecutor(burst) as ex:
            for sid, seconds in ex.map(lambda _: _first_call(d), range(burst)):
                ids.append(sid)
                burst_sample.times.append(seconds)
        after = dict(d.client.admin_stats().sessions_created)
        warm_in_burst = after.get("pool", 0) - created.get("pool", 0)
        t_steady = time.monotonic()
        next_at = t_steady
        while time.monotonic() - t_steady < steady_s:
            time.sleep(max(0.0, next_at - time.monotonic()))
            sid, seconds = _first_call(d)
            ids.append(sid)
            steady.times.append(seconds)
            next_at += 1 / rate
        with ThreadPoolExecutor(16) as ex:
            list(ex.map(d.client.close_session, ids))
        ids = []
        quiet_from = watch.elapsed()
        deadline = time.monotonic() + WINDOW_S + 10
        while _ready(d) > 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        points = watch.stop()
        peak = max((n for _, n in points), default=0)
        back = next((t for t, n in points if t > quiet_from and n <= 1), None)
        line = (
            f"Warm pool at its defaults (pool_min 1, pool_size 8, pool_window_s {WINDOW_S:g}): "
            f"{warm_in_burst} of a burst of {burst} creates after an idle spell were warm; "
            f"the pool grew to {peak} ready, served a steady {rate:g}/s for {steady_s:g} s, "
            + (
                f"and was back to 1 ready {back - quiet_from:.0f} s after the last create."
                if back is not None
                else "and had not shrunk back to 1 ready when the run moved on."
            )
        )
        return [first, burst_sample, steady], line
    finally:
        if ids:
            with ThreadPoolExecutor(16) as ex:
                list(ex.map(d.client.close_session, ids))
        d.stop()
