"""CPU per call, split by where it is spent: `python -m bench.speed [--calls N] [--rounds R]`.

Wall-clock latency on a shared host mostly measures the other tenants;
CPU time does not (much). For each operation this runs N calls R times in
one session of a `toolrt serve` child process and reports, per call, the
median over rounds of:
- daemon: the daemon process's CPU (user + system, all threads);
- sandbox: the session container's cgroup CPU;
- agent: the agent's own CPU (PID 1 in the sandbox, from /proc/<pid>/stat);
- launched: the CPU of the processes the agent reaped (the launcher and
  bash: what a command costs before it does anything).
Operations: `GetSession` (the transport and authentication alone), an
Execute of an unknown tool (the call path without the sandbox), `shell
true`, and `read_file` of a 1 MiB file (2000 lines of it returned).
`--agent static` measures the static agent (`make agent`) instead of the
Python one; the agent's resident memory is reported after the runs.
Needs the Docker engine (cgroup v1 or v2) and the sandbox image.
"""

from __future__ import annotations

import argparse
import os
import statistics
import uuid
from collections.abc import Callable

import docker
import psutil

from bench.ours import Daemon, _container_cpu_ns, shell
from runtime.sandbox.docker.backend import container_name

COLUMNS = ("daemon", "sandbox", "agent", "launched")


def _agent_cpu(pid: int) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds of process `pid`."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def _per_call(
    daemon: psutil.Process, session_id: str, agent_pid: int, fn: Callable[[], object], n: int
) -> dict[str, float]:
    """ms of CPU per call of `fn`, in each column."""
    d0, c0, a0 = sum(daemon.cpu_times()[:2]), _container_cpu_ns(session_id), _agent_cpu(agent_pid)
    for _ in range(n):
        fn()
    d1, c1, a1 = sum(daemon.cpu_times()[:2]), _container_cpu_ns(session_id), _agent_cpu(agent_pid)
    sandbox = (c1 - c0) / 1e6 if c0 is not None and c1 is not None else float("nan")
    return {
        "daemon": (d1 - d0) * 1e3 / n,
        "sandbox": sandbox / n,
        "agent": (a1[0] - a0[0]) * 1e3 / n,
        "launched": (a1[1] - a0[1]) * 1e3 / n,
    }


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def measure(calls: int, rounds: int, agent: str) -> tuple[dict[str, dict[str, float]], int]:
    """The table, and the agent's resident KiB once the calls are done."""
    d = Daemon(f"speed-{uuid.uuid4().hex[:8]}", 0, settings={"TOOLRT_AGENT": agent})
    engine = docker.from_env(timeout=60)
    try:
        with d.client.session() as s:
            agent_pid = engine.api.inspect_container(container_name(s.id))["State"]["Pid"]
            shell(d.client, s.id, "yes 0123456789abcdefghijklmnopqrstu | head -c 1048576 > big")

            def read() -> None:
                result = s.call("read_file", {"path": "big"})
                if not result.ok:
                    raise RuntimeError(result.error_message)

            operations: dict[str, Callable[[], object]] = {
                "GetSession": lambda: d.client.get_session(s.id),
                "Execute unknown tool": lambda: s.call("no_such_tool", {}),
                "shell true": lambda: shell(d.client, s.id, "true"),
                "read_file 1 MiB": read,
            }
            rows: dict[str, list[dict[str, float]]] = {name: [] for name in operations}
            daemon = psutil.Process(d.proc.pid)
            for fn in operations.values():
                for _ in range(10):
                    fn()
            for _ in range(rounds):
                for name, fn in operations.items():
                    rows[name].append(_per_call(daemon, s.id, agent_pid, fn, calls))
            rss = _rss_kib(agent_pid)
        table = {
            name: {col: statistics.median(r[col] for r in runs) for col in COLUMNS}
            for name, runs in rows.items()
        }
        return table, rss
    finally:
        engine.close()
        d.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per round (200)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, interleaved (3)")
    parser.add_argument("--agent", choices=("python", "static"), default="python")
    args = parser.parse_args()
    table, rss = measure(args.calls, args.rounds, args.agent)
    rounds = f"median of {args.rounds} rounds of {args.calls} calls"
    print(f"{args.agent} agent: CPU ms per call, {rounds}")
    print(f"| operation | {' | '.join(COLUMNS)} |")
    print(f"|---|{'---:|' * len(COLUMNS)}")
    for name, cols in table.items():
        print(f"| {name} | {' | '.join(f'{cols[c]:.2f}' for c in COLUMNS)} |")
    print(f"the agent's resident memory after the calls: {rss / 1024:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
