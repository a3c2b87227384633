"""toolrt measured from the outside: a `toolrt serve` child process and
gRPC clients, as an agent loop would use it."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import queue
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
import grpc
import psutil

from bench.stats import Sample, callers, timed
from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime._proto.toolruntime.v1 import runtime_pb2_grpc as pb_grpc
from runtime.auth.tokens import create_token
from runtime.client import Client
from runtime.client.sdk import bearer_metadata
from runtime.sandbox.docker.backend import container_name

KiB, MiB = 1 << 10, 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """`python -m runtime serve` in a child process, so clients and daemon
    do not share a GIL."""

    def __init__(
        self,
        instance: str,
        pool_size: int | None = 0,
        log_path: str = "",
        config: str = "",
        token: str = "",
        settings: dict[str, str] | None = None,
    ) -> None:
        """`pool_size=None` leaves the pool at its defaults; `config`: a TOML
        file for what the environment cannot say (tables); `token`: the bearer
        token of `self.client`; `settings` are more TOOLRT_* values (they
        win over a TOML file's)."""
        self.instance = instance
        self.token = token
        self.target = f"127.0.0.1:{_free_port()}"
        # Durable state in a directory of its own, removed by stop(): the
        # default, /var/lib/toolrt/<instance>, would outlive the run.
        self._state = tempfile.TemporaryDirectory(prefix="toolrt-bench-state-")
        env = {
            **os.environ,
            "TOOLRT_MAX_SESSIONS": "512",
            "TOOLRT_LOG_LEVEL": "WARNING",
            "TOOLRT_STATE_DIR": self._state.name,
        }
        if pool_size is not None:
            env["TOOLRT_POOL_SIZE"] = str(pool_size)
        env.update(settings or {})
        env.pop("TOOLRT_CONFIG", None)
        log = open(log_path or os.devnull, "ab")  # noqa: SIM115 - closed in stop()
        self._log = log
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runtime",
                "serve",
                "--listen",
                self.target,
                "--instance",
                instance,
                *(["--config", config] if config else []),
            ],
            env=env,
            stdout=log,
            stderr=log,
        )
        self.client = Client(self.target, token=token, timeout=120)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.tools = [t["name"] for t in self.client.list_tools()]
                break
            except Exception:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    msg = f"the toolrt daemon did not come up (log: {log_path})"
                    raise RuntimeError(msg) from None
                time.sleep(0.1)

    @property
    def state_dir(self) -> str:
        """The daemon's own temporary state_dir (removed by stop())."""
        return self._state.name

    def rss(self) -> int:
        return int(psutil.Process(self.proc.pid).memory_info().rss)

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        self._state.cleanup()


# What `featured` turns on, as the report says it.
FEATURES = (
    "bearer-token authentication (`auth.tokens_file`, a token on every call), "
    "an audit log (`audit_log`), durable state (`state_dir`, SQLite) and "
    "Prometheus metrics (`metrics_listen` on 127.0.0.1)"
)


def configured(
    instance: str,
    log_path: str,
    tmp: Path,
    toml: str,
    tenants: list[str],
    pool_size: int | None = 0,
    settings: dict[str, str] | None = None,
) -> tuple[Daemon, dict[str, str]]:
    """A daemon whose configuration is `toml` (`@TMP@` standing for `tmp`)
    plus a tokens file holding one token per tenant (none, and no `[auth]`,
    when `tenants` is empty); its client carries the first tenant's token.
    Its files go in `tmp`, named after the instance."""
    tokens: dict[str, str] = {}
    if tenants:
        path = tmp / f"{instance}.tokens"
        for tenant in tenants:
            tokens[tenant] = create_token(str(path), tenant)[1]
        # After the top-level keys, which a table header would capture.
        toml = f'{toml}\n[auth]\ntokens_file = "{path}"\n'
    config = tmp / f"{instance}.toml"
    config.write_text(toml.replace("@TMP@", str(tmp)))
    first = tokens[tenants[0]] if tenants else ""
    return Daemon(instance, pool_size, log_path, str(config), first, settings), tokens


def featured(
    instance: str,
    log_path: str,
    tmp: Path,
    pool_size: int | None = 0,
    settings: dict[str, str] | None = None,
) -> Daemon:
    """A daemon with FEATURES on, as a deployment would run it; its audit
    log and tokens live in `tmp` (the caller removes it), its durable state
    in the temporary state_dir every Daemon has."""
    metrics = f"127.0.0.1:{_free_port()}"
    toml = f'audit_log = "@TMP@/{instance}.audit.jsonl"\nmetrics_listen = "{metrics}"\n'
    d, _ = configured(instance, log_path, tmp, toml, ["bench"], pool_size, settings)
    # No proxy: the scrape stays on this host whatever the environment says.
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        # The report says metrics were served: make sure they are.
        with direct.open(f"http://{metrics}/metrics", timeout=10) as reply:
            reply.read()
    except BaseException:
        d.stop()
        raise
    return d


def shell(client: Client, session_id: str, command: str) -> Any:
    return called(client, session_id, "shell", {"command": command})


def called(client: Client, session_id: str, tool: str, arguments: dict[str, Any]) -> Any:
    """A tool call's result; RuntimeError if it failed."""
    result = client.call(session_id, tool, arguments)
    if not result.ok:
        msg = f"{tool} {arguments!r} failed: {result.error_code} {result.error_message}"
        raise RuntimeError(msg)
    return result


def _container_cpu_ns(session_id: str) -> int | None:
    """CPU time the session's container has used (cgroup v1 or v2), or None."""
    client = docker.from_env(timeout=60)
    try:
        cid = client.api.inspect_container(container_name(session_id))["Id"]
    finally:
        client.close()
    try:
        with open(f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage") as f:
            return int(f.read())
    except OSError:
        pass
    try:
        with open(f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat") as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) * 1000
    except OSError:
        pass
    return None


def execute_true(d: Daemon, n: int, cpu: dict[str, float]) -> Sample:
    """Sequential `shell true`; also CPU per call in the sandbox and the daemon."""
    with d.client.session() as s:
        for _ in range(20):
            shell(d.client, s.id, "true")
        daemon = psutil.Process(d.proc.pid)
        before = _container_cpu_ns(s.id), sum(daemon.cpu_times()[:2])
        sample = timed("toolrt Execute shell true", n, lambda: shell(d.client, s.id, "true"), 0)
        after = _container_cpu_ns(s.id), sum(daemon.cpu_times()[:2])
        if before[0] is not None and after[0] is not None:
            cpu["sandbox_cpu_ms_per_call"] = (after[0] - before[0]) / n / 1e6
        cpu["daemon_cpu_ms_per_call"] = (after[1] - before[1]) / n * 1e3
        return sample


def python_calls(client: Client, n: int, sessions: int) -> tuple[Sample, Sample, Sample]:
    """The python tool: its first call in a session (the interpreter starts),
    then warm `1+1` beside `shell python3 -c '1+1'` (a new process per call)."""
    first = Sample("toolrt python first call")
    for _ in range(sessions):
        with client.session() as s:
            started = time.perf_counter()
            python(client, s.id, "1+1")
            first.times.append(time.perf_counter() - started)
    with client.session() as s:
        warm = timed("toolrt python 1+1 (warm)", n, lambda: python(client, s.id, "1+1"))
        cmd = "python3 -c '1+1'"
        fresh = timed("toolrt shell python3 -c 1+1", n, lambda: shell(client, s.id, cmd))
    return first, warm, fresh


def python(client: Client, session_id: str, code: str) -> Any:
    return called(client, session_id, "python", {"code": code})


def file_calls(d: Daemon, session_id: str) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """write_file of 1 KiB and read_file of 1 MiB in the session, as calls to
    time beside their archive baselines; raises where the catalog lacks them."""
    if "write_file" not in d.tools or "read_file" not in d.tools:
        msg = "write_file/read_file are not in this build's catalog"
        raise LookupError(msg)
    small = "x" * (KiB - 1) + "\n"
    shell(d.client, session_id, "yes 0123456789abcdefghijklmnopqrstu | head -c 1048576 > big.txt")

    def call(tool: str, arguments: dict[str, str]) -> None:
        r = d.client.call(session_id, tool, arguments)
        if not r.ok:
            raise RuntimeError(r.error_message)

    return (
        lambda: call("write_file", {"path": "/workspace/small.txt", "content": small}),
        lambda: call("read_file", {"path": "/workspace/big.txt"}),
    )


def create_close_once(d: Daemon) -> tuple[float, float]:
    """Seconds of a cold CreateSession, and of its CloseSession (after one call)."""
    started = time.perf_counter()
    sid = d.client.create_session().id
    created = time.perf_counter() - started
    shell(d.client, sid, "true")
    started = time.perf_counter()
    d.client.close_session(sid)
    return created, time.perf_counter() - started


def warm_first_call(d: Daemon, n: int, refill_wait_s: float) -> Sample:
    """CreateSession + first Execute, each from a refilled warm pool."""
    sample = Sample("toolrt warm CreateSession + first Execute")
    time.sleep(refill_wait_s * 3)  # the initial fill
    for _ in range(n):
        started = time.perf_counter()
        sid = d.client.create_session().id
        shell(d.client, sid, "true")
        sample.times.append(time.perf_counter() - started)
        d.client.close_session(sid)
        time.sleep(refill_wait_s)
    return sample


# -- concurrent load -----------------------------------------------------------
async def _callers(
    target: str, token: str, sessions: list[str], per_session: int, start_at: float, seconds: float
) -> dict:
    latencies: list[float] = []
    failures: list[str] = []
    metadata = bearer_metadata(token)
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.ToolRuntimeStub(channel)
        await asyncio.sleep(max(0.0, start_at - time.time()))
        stop_at = time.perf_counter() + seconds

        async def one(session_id: str) -> None:
            while time.perf_counter() < stop_at:
                nonce = uuid.uuid4().hex
                call = pb.ToolCall(
                    id=f"call-{nonce}",
                    name="shell",
                    arguments_json=f'{{"command": "echo {nonce}"}}',
                )
                started = time.perf_counter()
                try:
                    reply = await stub.Execute(
                        pb.ExecuteRequest(session_id=session_id, call=call),
                        timeout=120,
                        metadata=metadata,
                    )
                except grpc.aio.AioRpcError as exc:
                    failures.append(f"{session_id}: {exc.code().name}")
                    continue
                latencies.append(time.perf_counter() - started)
                # Every result must answer its own call: same id, same nonce echoed.
                if reply.call_id != call.id or not reply.ok or nonce not in reply.output_json:
                    failures.append(f"{session_id}: {call.id} -> {reply.call_id} {reply.ok}")

        await asyncio.gather(*(one(s) for s in sessions for _ in range(per_session)))
    return {"latencies": latencies, "failures": failures}


def _worker(
    target: str,
    token: str,
    sessions: list[str],
    per_session: int,
    start_at: float,
    seconds: float,
    out: Any,
) -> None:
    out.put(asyncio.run(_callers(target, token, sessions, per_session, start_at, seconds)))


def load(
    d: Daemon,
    sessions: int,
    seconds: float,
    callers_per_session: int = 1,
    keep: bool = False,
) -> tuple[Sample, list[str]]:
    """`sessions` sessions, `callers_per_session` concurrent callers each,
    `echo <nonce>` in a loop.

    Callers are asyncio tasks spread over up to 4 processes (spawned, so they
    start with a fresh gRPC); a session's callers share its process. Returns
    the sample and, with `keep`, the session ids (left open for the caller
    to inspect and close)."""
    with ThreadPoolExecutor(16) as ex:
        ids = list(ex.map(lambda _: d.client.create_session().id, range(sessions)))
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = min(sessions, 4)
    start_at = time.time() + 3.0
    workers = [
        ctx.Process(
            target=_worker,
            args=(d.target, d.token, ids[i::procs], callers_per_session, start_at, seconds, out),
        )
        for i in range(procs)
    ]
    for w in workers:
        w.start()
    results = []
    deadline = time.monotonic() + seconds + 180
    while len(results) < len(workers):
        try:
            results.append(out.get(timeout=1))
        except queue.Empty:
            if time.monotonic() > deadline or not any(w.is_alive() for w in workers):
                close_all(d, ids)
                msg = f"load generator processes died or hung ({len(results)} answered)"
                raise RuntimeError(msg) from None
    for w in workers:
        w.join(30)
    sample = Sample(f"toolrt {sessions} sessions x {callers(callers_per_session)}")
    for r in results:
        sample.times.extend(r["latencies"])
        sample.failures += len(r["failures"])
        if r["failures"] and not sample.note:
            sample.note = r["failures"][0]
    sample.calls_per_s = len(sample.times) / seconds
    if not keep:
        close_all(d, ids)
        ids = []
    return sample, ids


def alternating_loads(
    on: Daemon, off: Daemon, sessions: int, seconds: float, callers_per_session: int
) -> tuple[Sample, Sample]:
    """`load` on two daemons in four runs of `seconds / 2`, on, off, off, on,
    so that a drift in the host's speed weighs on both alike; each sample
    holds its two runs (calls/s over their total time). A short run on
    `off` first, not counted, so that it is not measured while new (`on`
    has served the run's earlier sections)."""
    half = seconds / 2
    load(off, sessions, min(half, 2.0), callers_per_session)
    runs: dict[Daemon, list[Sample]] = {on: [], off: []}
    for d in (on, off, off, on):
        runs[d].append(load(d, sessions, half, callers_per_session)[0])
    merged = []
    for d, suffix in ((on, ""), (off, ", features off")):
        parts = runs[d]
        sample = Sample(parts[0].name + suffix)
        for part in parts:
            sample.times.extend(part.times)
            sample.failures += part.failures
            sample.note = sample.note or part.note
        sample.calls_per_s = sample.n / (half * len(parts))
        merged.append(sample)
    return merged[0], merged[1]


def close_all(d: Daemon, ids: list[str]) -> None:
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(d.client.close_session, ids))


def idle_session_bytes(ids: list[str], count: int = 4) -> int:
    """Memory of idle sessions as `docker stats` shows it (usage - page cache)."""
    client = docker.from_env(timeout=60)
    try:
        sizes = []
        for sid in ids[:count]:
            stats = client.api.stats(container_name(sid), stream=False)
            mem = stats["memory_stats"]
            detail = mem.get("stats", {})
            cache = detail.get("total_inactive_file", detail.get("inactive_file", 0))
            sizes.append(int(mem["usage"]) - int(cache))
        return int(sum(sizes) / len(sizes)) if sizes else 0
    finally:
        client.close()
