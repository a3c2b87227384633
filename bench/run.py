"""`make bench`: toolrt against its baselines and llm-sandbox, in one run.

    bench/.venv/bin/python -m bench.run [--quick] [--only tenants]

Prints the latency table, the targets as ratios (misses marked), and the
concurrency curve; writes bench/results/latest.{md,json}, curve.png, every
table into docs/benchmarks.md and a few headline ratios into README.md. The
identity figures (bench/tenants.py) also go to bench/results/tenants.{md,json};
`--only tenants` measures just those and replaces just their part of
docs/benchmarks.md; so do another tenant's calls beside each attempt to
exhaust a share (bench/shares.py) with `--only shares`, and the programs'
RPCs beside their baselines (bench/programs.py) with `--only programs`. runc and runsc side by side
(bench/runtimes.py) also go to bench/results/runtimes.{md,json}; `--only
runtimes` measures just those. Removes every container it started.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import docker

from bench import (
    harnesses,
    operations,
    ours,
    programs,
    report,
    runtimes,
    shares,
    snapshots,
    tenants,
    typescript,
)
from bench.baselines import Baselines
from bench.stats import Sample, interleave, missing

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
# Where the tables land (between report's markers), and the README's summary.
DOCS_PAGE = ROOT / "docs" / "benchmarks.md"
README = ROOT / "README.md"
CURVE = (1, 4, 16, 64)
# The throughput target's shape, toolrt and exec_run alike: sessions (containers)
# and concurrent callers in each.
THROUGHPUT = (8, 8)
# What a section measured on its own returns.
Found = TypeVar("Found")

# Short names used in the target table.
NAMES = {
    "exec": "Execute shell true",
    "exec_run": "SDK exec_run",
    "host": "host subprocess",
    "write": "write_file 1 KiB",
    "put_archive": "put_archive",
    "read": "read_file 1 MiB",
    "get_archive": "get_archive",
    "warm": "warm create + first Execute",
    "create_start": "raw create+start",
    "cold": "cold CreateSession",
    "close": "CloseSession",
    "kill_remove": "raw kill+remove",
    "cli": "CLI docker exec",
    "llm_exec": "llm-sandbox execute_command",
    "llm_open": "llm-sandbox open + first command",
    "obs_on": "Execute, metrics and tracing on",
    "obs_off": "Execute, metrics and tracing off",
    "warm_default": "warm-by-default create + first Execute",
    "ts_exec": "TypeScript client shell true",
    "py_exec": "Python client shell true",
}


def machine() -> dict[str, str]:
    client = docker.from_env(timeout=30)
    try:
        info = client.info()
        version = client.version().get("Version", "?")
    finally:
        client.close()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": str(os.cpu_count()),
        "memory": f"{mem / (1 << 30):.1f} GiB",
        "kernel": platform.release(),
        "docker": version,
        "runtime": str(info.get("DefaultRuntime", "?")),
        "cgroup": f"v{info.get('CgroupVersion', '?')}",
        "python": platform.python_version(),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def machine_line(host: dict[str, str], quick: bool) -> str:
    return (
        f"{host['date']}: {host['cpus']} CPUs, {host['memory']}, kernel {host['kernel']}, "
        f"Docker {host['docker']} (runtime {host['runtime']}, cgroup {host['cgroup']}), "
        f"Python {host['python']}, load average before the report {host['load']}"
        + (" (--quick)" if quick else "")
    )


def remove_containers(daemons: list[ours.Daemon]) -> int:
    """Stop the daemons and remove whatever containers they left (by instance label)."""
    left = 0
    for d in daemons:
        d.stop()
    client = docker.from_env(timeout=60)
    try:
        for instance in {d.instance for d in daemons}:
            for c in client.containers.list(
                all=True, filters={"label": f"toolrt.daemon={instance}"}
            ):
                left += 1
                c.remove(force=True)
    finally:
        client.close()
    return left


def identity(s: dict[str, Sample], host: dict[str, str], quick: bool, command: str) -> list[str]:
    """The identity section; also written on its own to bench/results/tenants.{md,json}."""
    md = report.identity_section(
        s,
        tenants.NAMES,
        f"Measured by `{command}` on {machine_line(host, quick)}.",
        flooders=tenants.FLOODERS,
        rate=tenants.FLOOD_RATE,
    )
    (RESULTS / "tenants.md").write_text("\n".join(md) + "\n")
    (RESULTS / "tenants.json").write_text(
        json.dumps(
            {
                "machine": host,
                "quick": quick,
                "samples": {k: v.as_dict() for k, v in s.items()},
                "ratios": [c.__dict__ for c in report.identity_checks(s)],
            },
            indent=1,
        )
    )
    return md


def runtimes_section(s: dict[str, Sample], host: dict[str, str], quick: bool) -> list[str]:
    """gVisor's price; also written on its own to bench/results/runtimes.{md,json}."""
    md = [
        "runc and gVisor (runsc), one daemon offering both, calls interleaved:",
        "",
        *runtimes.table(s),
    ]
    (RESULTS / "runtimes.md").write_text("\n".join(md) + "\n")
    (RESULTS / "runtimes.json").write_text(
        json.dumps(
            {"machine": host, "quick": quick, "samples": {k: v.as_dict() for k, v in s.items()}},
            indent=1,
        )
    )
    return md


def measured_alone(
    measure: Callable[[str, str, bool, list[ours.Daemon]], Found],
    args: argparse.Namespace,
    instance: str,
    log_path: str,
) -> Found:
    """One section's figures (`--only`), every container it started removed."""
    daemons: list[ours.Daemon] = []
    try:
        return measure(instance, log_path, args.quick, daemons)
    finally:
        left = remove_containers(daemons)
        if left:
            print(f"removed {left} container(s) left by the run", file=sys.stderr)


def file_rounds(s: dict[str, Sample], d: ours.Daemon, base: Baselines, quick: bool) -> None:
    """write_file/read_file beside put_archive/get_archive, round by round:
    measured one after the other, their ratio swung 17-26x between runs with
    whatever the host did in between."""
    s["put_archive"], s["get_archive"] = (
        Sample("SDK put_archive 1 KiB"),
        Sample("SDK get_archive 1 MiB"),
    )
    s["write"], s["read"] = Sample("toolrt write_file 1 KiB"), Sample("toolrt read_file 1 MiB")
    with base.archive_calls() as (put, get), d.client.session() as session:
        why = ""
        try:
            write, read = ours.file_calls(d, session.id)
        except LookupError as exc:
            why = str(exc)
        except Exception as exc:  # noqa: BLE001 - the baselines and the rest still count
            why = f"failed: {type(exc).__name__}: {str(exc)[:120]}"
        rounds, each = (3, 5) if quick else (10, 10)
        put_part = (s["put_archive"], each // 2 + 1, put)
        get_part = (s["get_archive"], each // 2 + 1, get)
        if not why:
            try:
                interleave(
                    rounds, [(s["write"], each, write), put_part, (s["read"], each, read), get_part]
                )
                return
            except Exception as exc:  # noqa: BLE001 - the rest of the run still counts
                why = f"failed: {type(exc).__name__}: {str(exc)[:120]}"
        s["write"], s["read"] = missing(s["write"].name, why), missing(s["read"].name, why)
        if not s["put_archive"].times:
            interleave(rounds, [put_part, get_part])


def only_command(args: argparse.Namespace, section: str) -> str:
    return f"make bench BENCH_ARGS='--only {section}" + (" --quick'" if args.quick else "'")


def splice_part(args: argparse.Namespace, markdown: str, start: str, end: str) -> int:
    """Print a section measured on its own and replace its part of docs/benchmarks.md."""
    print("\n" + markdown)
    if not args.no_docs and not report.splice(DOCS_PAGE, markdown, start, end):
        print(f"{DOCS_PAGE} has no {start} marker: left alone", file=sys.stderr)
    return 0


def only_runtimes(args: argparse.Namespace, instance: str, log_path: str) -> int:
    s = measured_alone(runtimes.measure, args, instance, log_path)
    print("\n" + "\n".join(runtimes_section(s, machine(), args.quick)))
    return 0


def only_typescript(args: argparse.Namespace, instance: str, log_path: str) -> int:
    """The TypeScript client's row and the Python client's beside it, printed only."""
    s = measured_alone(typescript.alone, args, instance, log_path)
    value = report.ratio(s["ts_exec"].p50, s["py_exec"].p50)
    print("\n" + "\n".join(report.latency_table(s)))
    print(f"\nts_exec / py_exec (p50): {value:.3g}")
    return 0


def only_harnesses(args: argparse.Namespace, instance: str, log_path: str) -> int:
    """Each harness's create + first command on toolrt and on its own Docker sandbox, printed."""
    s = measured_alone(harnesses.alone, args, instance, log_path)
    print("\n" + "\n".join(report.latency_table(s)))
    return 0


def only_tenants(args: argparse.Namespace, instance: str, log_path: str) -> int:
    s = measured_alone(tenants.measure, args, instance, log_path)
    markdown = "\n".join(identity(s, machine(), args.quick, only_command(args, "tenants")))
    return splice_part(args, markdown, report.TENANTS_START, report.TENANTS_END)


def sampled_section(
    name: str,
    section: Callable[[dict[str, Sample], str], list[str]],
    s: dict[str, Sample],
    host: dict[str, str],
    quick: bool,
    command: str,
) -> str:
    """A section of samples as markdown; also written to bench/results/NAME.{md,json}."""
    md = "\n".join(section(s, f"Measured by `{command}` on {machine_line(host, quick)}."))
    (RESULTS / f"{name}.md").write_text(md + "\n")
    (RESULTS / f"{name}.json").write_text(
        json.dumps(
            {"machine": host, "quick": quick, "samples": {k: v.as_dict() for k, v in s.items()}},
            indent=1,
        )
    )
    return md


def only_sampled(
    args: argparse.Namespace,
    instance: str,
    log_path: str,
    part: tuple[str, Callable[..., dict[str, Sample]], Callable[..., list[str]], str, str],
) -> int:
    """`--only NAME` of a section of samples: (name, measure, section, start, end marker)."""
    name, measure, section, start, end = part
    s = measured_alone(measure, args, instance, log_path)
    markdown = sampled_section(name, section, s, machine(), args.quick, only_command(args, name))
    return splice_part(args, markdown, start, end)


def share_figures(
    found: dict[str, shares.Outcome], host: dict[str, str], quick: bool, command: str
) -> str:
    """The shares section; also written to bench/results/shares.{md,json}."""
    measured = f"Measured by `{command}` on {machine_line(host, quick)}."
    md = "\n".join(shares.section(found, measured))
    (RESULTS / "shares.md").write_text(md + "\n")
    (RESULTS / "shares.json").write_text(
        json.dumps({"machine": host, "quick": quick, "attempts": shares.as_json(found)}, indent=1)
    )
    return md


def only_shares(args: argparse.Namespace, instance: str, log_path: str) -> int:
    found = measured_alone(shares.measure, args, instance, log_path)
    markdown = share_figures(found, machine(), args.quick, only_command(args, "shares"))
    return splice_part(args, markdown, shares.START, shares.END)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (~2 minutes)")
    parser.add_argument(
        "--no-docs", action="store_true", help="leave README.md and docs/benchmarks.md alone"
    )
    parser.add_argument(
        "--only",
        choices=[
            "tenants",
            "snapshots",
            "runtimes",
            "shares",
            "typescript",
            "harnesses",
            "programs",
        ],
        help="just this section (its part of docs/benchmarks.md; runtimes, typescript, "
        "harnesses: none)",
    )
    args = parser.parse_args()
    quick = args.quick
    run_id = uuid.uuid4().hex[:8]
    instance = f"bench-{run_id}"
    RESULTS.mkdir(parents=True, exist_ok=True)
    log_path = str(RESULTS / "daemon.log")
    Path(log_path).write_text("")
    if args.only == "tenants":
        return only_tenants(args, instance, log_path)
    if args.only == "snapshots":
        part = ("snapshots", snapshots.measure, snapshots.section, snapshots.START, snapshots.END)
        return only_sampled(args, instance, log_path, part)
    if args.only == "runtimes":
        return only_runtimes(args, instance, log_path)
    if args.only == "shares":
        return only_shares(args, instance, log_path)
    if args.only == "typescript":
        return only_typescript(args, instance, log_path)
    if args.only == "harnesses":
        return only_harnesses(args, instance, log_path)
    if args.only == "programs":
        part = ("programs", programs.alone, programs.section, programs.START, programs.END)
        return only_sampled(args, instance, log_path, part)
    base = Baselines(instance, quick)
    s: dict[str, Sample] = {}
    extra: dict[str, int] = {}
    cpu: dict[str, float] = {}
    curve: list[tuple[int, Sample]] = []
    started = time.monotonic()

    def step(what: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {what}", file=sys.stderr, flush=True)

    daemons: list[ours.Daemon] = []
    pool_line = ""
    # Tokens, audit logs and durable state of the featured daemons.
    featured_files = tempfile.TemporaryDirectory(prefix="toolrt-bench-")
    tmp = Path(featured_files.name)
    try:
        cold = ours.featured(f"{instance}-a", log_path, tmp)
        daemons.append(cold)
        step("Execute vs host, exec_run and docker exec, in interleaved rounds")
        s["host"] = Sample("host subprocess bash -c true")
        s["exec_run"] = Sample("SDK exec_run true")
        s["cli"] = Sample("CLI docker exec true")
        s["exec"] = Sample("toolrt Execute shell true")
        with base.exec_target() as (exec_run, cli), cold.client.session() as session:
            parts = [
                (s["exec"], 40, lambda: ours.shell(cold.client, session.id, "true")),
                (s["host"], 30, base.host_once),
                (s["exec_run"], 6, exec_run),
            ]
            if cli is not None:
                parts.append((s["cli"], 4, cli))
            else:
                s["cli"].note = "no docker CLI on this host"
            interleave(3 if quick else 10, parts)
        ours.execute_true(cold, 100, cpu)
        step("the TypeScript client's shell true beside the Python client's")
        s["ts_exec"], s["py_exec"] = typescript.measure(cold, quick)
        step("harnesses: create + first command on toolrt and on their own Docker sandboxes")
        s.update(harnesses.measure(cold, quick))
        step("programs: Exec and 100 MiB WriteFile/ReadFile beside their baselines")
        by_program = programs.measure(cold, base, quick)
        step("toolrt: the python tool, first and warm calls, beside shell python3 -c")
        s["py_first"], s["py_warm"], s["py_shell"] = ours.python_calls(
            cold.client, 30 if quick else 100, 3 if quick else 10
        )
        step("CreateSession/CloseSession vs raw create+start/kill+remove, interleaved")
        s["create_start"], s["kill_remove"] = Sample("raw create+start"), Sample("raw kill+remove")
        s["cold"], s["close"] = Sample("toolrt CreateSession (cold)"), Sample("toolrt CloseSession")
        base.lifecycle_once()  # warm the engine's caches
        for _ in range(6 if quick else 20):
            for (a, b), pair in (
                (base.lifecycle_once(), ("create_start", "kill_remove")),
                (ours.create_close_once(cold), ("cold", "close")),
            ):
                s[pair[0]].times.append(a)
                s[pair[1]].times.append(b)
        tput_sessions, per_session = THROUGHPUT
        tput_s = 4 if quick else 8
        shape = f"{tput_sessions} sessions x {per_session} callers"
        step("toolrt's file tools vs put_archive/get_archive, in interleaved rounds")
        file_rounds(s, cold, base, quick)
        step(f"baselines: llm-sandbox, exec_run {shape}")
        s["llm_exec"], s["llm_open"] = base.llm_sandbox()
        s["exec_run_tput"] = base.exec_run_throughput(tput_sessions, tput_s, per_session)
        step(f"toolrt: throughput {shape}, the features on and off in alternating runs")
        # The same daemon with no authentication, audit log or metrics (its
        # durable state cannot be turned off): what the features cost, in
        # this run, whatever the host's speed.
        plain = ours.Daemon(f"{instance}-plain", 0, log_path)
        daemons.append(plain)
        s["load8"], s["load8_plain"] = ours.alternating_loads(
            cold, plain, tput_sessions, tput_s, per_session
        )
        plain.stop()
        for sessions in CURVE:
            step(f"toolrt: {sessions} concurrent sessions")
            seconds = (4 if quick else 10) if sessions == 64 else (3 if quick else 6)
            keep = sessions == CURVE[-1]
            rss_before = cold.rss()
            sample, ids = ours.load(cold, sessions, seconds, keep=keep)
            curve.append((sessions, sample))
            if keep:
                extra["daemon_rss_idle_bytes"] = rss_before
                extra["daemon_rss_64_bytes"] = cold.rss()
                time.sleep(1)
                extra["idle_session_bytes"] = ours.idle_session_bytes(ids)
                ours.close_all(cold, ids)
        s["load64"] = curve[-1][1]
        cold.stop()
        step("toolrt: warm pool")
        warm = ours.featured(f"{instance}-b", log_path, tmp, pool_size=2)
        daemons.append(warm)
        s["warm"] = ours.warm_first_call(warm, 8 if quick else 20, 1.0)
        warm.stop()
        step("identity: a token's cost per call, a flooding neighbour")
        ident = tenants.measure(instance, log_path, quick, daemons)
        step("snapshots, forks and restores vs download + create + upload")
        snaps = snapshots.measure(instance, log_path, quick, daemons)
        step("shares: another tenant beside each attempt to exhaust one")
        beside = shares.measure(instance, log_path, quick, daemons)
        step("toolrt: runc and runsc side by side")
        by_runtime = runtimes.measure(instance, log_path, quick, daemons)
        step("toolrt: metrics and tracing off and on, interleaved")
        s["obs_off"], s["obs_on"] = operations.observability_cost(
            instance, log_path, 3 if quick else 10
        )
        step("toolrt: the warm pool at its defaults: a burst after idle, then a steady rate")
        samples, pool_line = operations.pool_by_default(
            instance, log_path, firsts=5 if quick else 20, burst=8, steady_s=5 if quick else 15,
            rate=2,
        )  # fmt: skip
        s["warm_default"], s["burst"], s["steady"] = samples
    finally:
        left = base.cleanup() + remove_containers(daemons)
        client = docker.from_env(timeout=60)
        for suffix in ("-a", "-b", "-plain", "-rt", "-off", "-on", "-pool", "-snap"):
            for c in client.containers.list(
                all=True, filters={"label": f"toolrt.daemon={instance}{suffix}"}
            ):
                left += 1
                c.remove(force=True)
        client.close()
        base.close()
        featured_files.cleanup()
        if left:
            print(f"removed {left} container(s) left by the run", file=sys.stderr)

    step("report")
    found = report.checks(s, extra)
    host = machine()
    png = RESULTS / "curve.png"
    drew = report.plot(curve, png)
    memory_line = (
        f"Idle session: {extra.get('idle_session_bytes', 0) / (1 << 20):.1f} MiB "
        "(container memory less page cache, agent included); daemon RSS "
        f"{extra.get('daemon_rss_idle_bytes', 0) / (1 << 20):.0f} MiB idle, "
        f"{extra.get('daemon_rss_64_bytes', 0) / (1 << 20):.0f} MiB with 64 sessions."
    )
    per_call = cpu.get("sandbox_cpu_ms_per_call", 0) + cpu.get("daemon_cpu_ms_per_call", 0)
    ceiling = int(host["cpus"]) * 1000 / per_call if per_call else float("nan")
    cpu_line = (
        "CPU per sequential `shell true` call: "
        f"{cpu.get('sandbox_cpu_ms_per_call', float('nan')):.2f} ms in the sandbox "
        "(agent, launcher, bash), "
        f"{cpu.get('daemon_cpu_ms_per_call', float('nan')):.2f} ms in the daemon, so "
        f"{host['cpus']} CPUs cap throughput near "
        f"{ceiling:.0f} calls/s before any client or other load."
    )
    md = [
        f"Measured by `make bench` on {machine_line(host, quick)}.",
        "",
        f"The daemon of the targets, the concurrency curve and the warm pool runs on runc "
        f"with {ours.FEATURES} on, as a deployment would; the runsc figures below are "
        "reported beside them, not targeted.",
        "",
        "Targets (ratios of samples from the same run, or absolute figures where the "
        "target is one):",
        "",
        *report.target_table(found, NAMES),
        "",
        "Every operation:",
        "",
        *report.latency_table({k: v for k, v in s.items() if k != "load64"}),
        "",
        "Concurrency (one caller per session, `echo <nonce>` in a loop; every result "
        "checked against its call):",
        "",
        *report.curve_table(curve),
        "",
        memory_line,
        "",
        cpu_line,
        "",
        report.observability_line(s),
        "",
        pool_line,
        "",
        *runtimes_section(by_runtime, host, quick),
    ]
    if drew:
        md += ["", "![latency and throughput by concurrent sessions](../bench/results/curve.png)"]
    command = "make bench" + (" BENCH_ARGS=--quick" if quick else "")
    md += ["", report.TENANTS_START, *identity(ident, host, quick, command), report.TENANTS_END]
    snap_md = sampled_section("snapshots", snapshots.section, snaps, host, quick, command)
    md += ["", snapshots.START, snap_md, snapshots.END]
    share_md = share_figures(beside, host, quick, command)
    md += ["", shares.START, share_md, shares.END]
    program_md = sampled_section("programs", programs.section, by_program, host, quick, command)
    md += ["", programs.START, program_md, programs.END]
    markdown = "\n".join(md)
    print("\n" + markdown)
    # latest.md sits beside the plot; docs/benchmarks.md links it from docs/.
    (RESULTS / "latest.md").write_text(markdown.replace("](../bench/results/", "](") + "\n")
    (RESULTS / "latest.json").write_text(
        json.dumps(
            {
                "machine": host,
                "quick": quick,
                "features": ours.FEATURES,
                "samples": {k: v.as_dict() for k, v in s.items()},
                "curve": [{"sessions": n, **v.as_dict()} for n, v in curve],
                "memory": extra,
                "cpu_per_call": cpu,
                "targets": [c.__dict__ for c in found],
                "identity": {k: v.as_dict() for k, v in ident.items()},
                "runtimes": {k: v.as_dict() for k, v in by_runtime.items()},
                "programs": {k: v.as_dict() for k, v in by_program.items()},
            },
            indent=1,
        )
    )
    if not args.no_docs:
        report.splice(DOCS_PAGE, markdown)
        measured = f"Measured by `{command}` on {host['date']} ({host['cpus']} CPUs)."
        summary = report.headline(found, NAMES, measured)
        report.splice(README, "\n".join(summary), report.HEADLINE_START, report.HEADLINE_END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
