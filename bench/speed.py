"""CPU per call, split by where it is spent: `python -m bench.speed [--calls N] [--rounds R]`.

Wall-clock latency on a shared host mostly measures the other tenants;
CPU time does not (much). For each operation this runs N calls R times in
one session of a `toolrt serve` child process (bearer tokens, audit log,
durable state and metrics on, as `make bench` runs it; `--plain` for none)
and reports, per call, the median over rounds of:
- daemon: the daemon process's CPU (user + system, all threads);
- sandbox: the session container's cgroup CPU;
- agent: the agent's own CPU (PID 1 in the sandbox, from /proc/<pid>/stat);
- launched: the CPU of the processes the agent reaped (the launcher and
  bash: what a command costs before it does anything);
- shim: the session container's containerd-shim (the agent's parent chain);
- dockerd: the engine's daemon (it relays the attach stream when the daemon
  is not root; a root daemon's agent speaks on a socket of its own), shared
  with every other user of the engine: on a busy host it counts their work
  too;
- client: this process (the Python SDK, its gRPC threads).
`total` is daemon + sandbox + shim + dockerd + client: everything the host
spends on a call (the sandbox's cgroup holds the agent and what it launched).
Operations: `GetSession` (the transport and authentication alone), an
Execute of an unknown tool (the call path without the sandbox), `shell
true`, `write_file` of 1 KiB and `read_file` of a 1 MiB file (2000 lines
of it returned).
The agent's resident memory is reported after the runs.
Needs the Docker engine (cgroup v1 or v2) and the sandbox image.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import psutil

from bench.ours import Daemon, _container_cpu_ns, featured, shell
from runtime.sandbox.docker.backend import container_name

COLUMNS = ("daemon", "sandbox", "agent", "launched", "shim", "dockerd", "client", "total")
TOTAL_OF = ("daemon", "sandbox", "shim", "dockerd", "client")


def _agent_cpu(pid: int) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds of process `pid`."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def _shim_of(agent_pid: int) -> psutil.Process | None:
    """The containerd-shim above the container's first process (runc or runsc)."""
    with contextlib.suppress(psutil.Error):
        for parent in psutil.Process(agent_pid).parents():
            if parent.name().startswith("containerd-shim"):
                return parent
    return None


def _dockerd() -> psutil.Process | None:
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] == "dockerd":
            return proc
    return None


def _cpu_s(proc: psutil.Process | None) -> float:
    """User + system CPU seconds of `proc` (NaN when it is not there)."""
    if proc is None:
        return float("nan")
    try:
        return float(sum(proc.cpu_times()[:2]))
    except psutil.Error:
        return float("nan")


class Meters:
    """The processes a call's CPU is read from."""

    def __init__(self, daemon_pid: int, session_id: str, agent_pid: int) -> None:
        self.daemon = psutil.Process(daemon_pid)
        self.session_id = session_id
        self.agent_pid = agent_pid
        self.shim = _shim_of(agent_pid)
        self.dockerd = _dockerd()
        self.client = psutil.Process()

    def per_call(self, fn: Callable[[], object], n: int) -> dict[str, float]:
        """ms of CPU per call of `fn`, in each column."""
        c0, a0 = _container_cpu_ns(self.session_id), _agent_cpu(self.agent_pid)
        d0, s0, e0 = _cpu_s(self.daemon), _cpu_s(self.shim), _cpu_s(self.dockerd)
        k0 = _cpu_s(self.client)
        for _ in range(n):
            fn()
        k1 = _cpu_s(self.client)
        d1, s1, e1 = _cpu_s(self.daemon), _cpu_s(self.shim), _cpu_s(self.dockerd)
        c1, a1 = _container_cpu_ns(self.session_id), _agent_cpu(self.agent_pid)
        sandbox = (c1 - c0) / 1e6 if c0 is not None and c1 is not None else float("nan")
        row = {
            "daemon": (d1 - d0) * 1e3 / n,
            "sandbox": sandbox / n,
            "agent": (a1[0] - a0[0]) * 1e3 / n,
            "launched": (a1[1] - a0[1]) * 1e3 / n,
            "shim": (s1 - s0) * 1e3 / n,
            "dockerd": (e1 - e0) * 1e3 / n,
            "client": (k1 - k0) * 1e3 / n,
        }
        row["total"] = sum(row[c] for c in TOTAL_OF)
        return row


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@contextlib.contextmanager
def _daemon(plain: bool) -> Iterator[Daemon]:
    instance = f"speed-{uuid.uuid4().hex[:8]}"
    if plain:
        d = Daemon(instance, 0)
        try:
            yield d
        finally:
            d.stop()
        return
    with tempfile.TemporaryDirectory(prefix="toolrt-speed-") as tmp:
        d = featured(instance, "", Path(tmp))
        try:
            yield d
        finally:
            d.stop()


def _ok(result: object) -> None:
    if not getattr(result, "ok", False):
        raise RuntimeError(getattr(result, "error_message", "failed"))


def measure(
    calls: int, rounds: int, plain: bool = False
) -> tuple[dict[str, dict[str, float]], int]:
    """The table, and the agent's resident KiB once the calls are done."""
    engine = docker.from_env(timeout=60)
    try:
        with _daemon(plain) as d, d.client.session() as s:
            agent_pid = engine.api.inspect_container(container_name(s.id))["State"]["Pid"]
            shell(d.client, s.id, "yes 0123456789abcdefghijklmnopqrstu | head -c 1048576 > big")
            small = "x" * 1023 + "\n"
            operations: dict[str, Callable[[], object]] = {
                "GetSession": lambda: d.client.get_session(s.id),
                "Execute unknown tool": lambda: s.call("no_such_tool", {}),
                "shell true": lambda: shell(d.client, s.id, "true"),
                "write_file 1 KiB": lambda: _ok(
                    s.call("write_file", {"path": "small.txt", "content": small})
                ),
                "read_file 1 MiB": lambda: _ok(s.call("read_file", {"path": "big"})),
            }
            rows: dict[str, list[dict[str, float]]] = {name: [] for name in operations}
            meters = Meters(d.proc.pid, s.id, agent_pid)
            for fn in operations.values():
                for _ in range(10):
                    fn()
            for _ in range(rounds):
                for name, fn in operations.items():
                    rows[name].append(meters.per_call(fn, calls))
            rss = _rss_kib(agent_pid)
        table = {
            name: {col: statistics.median(r[col] for r in runs) for col in COLUMNS}
            for name, runs in rows.items()
        }
        return table, rss
    finally:
        engine.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per round (200)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, interleaved (3)")
    parser.add_argument(
        "--plain", action="store_true", help="no tokens, audit log or metrics (durable state stays)"
    )
    args = parser.parse_args()
    table, rss = measure(args.calls, args.rounds, args.plain)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    rounds = f"median of {args.rounds} rounds of {args.calls} calls"
    print(f"CPU ms per call, {rounds} (load {load})")
    print(f"| operation | {' | '.join(COLUMNS)} |")
    print(f"|---|{'---:|' * len(COLUMNS)}")
    for name, cols in table.items():
        print(f"| {name} | {' | '.join(f'{cols[c]:.2f}' for c in COLUMNS)} |")
    print(f"the agent's resident memory after the calls: {rss / 1024:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
