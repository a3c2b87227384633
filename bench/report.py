"""The targets of issues 4 and 17, as ratios of samples from one run (or
absolute figures where the target is one), printed and written as markdown
(bench/results/latest.md, also spliced into docs/benchmarks.md, and a few
headline ratios into README.md) and as a latency/throughput plot."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.stats import Sample

# Every table, in docs/benchmarks.md.
BENCH_START = "<!-- bench:start -->"
BENCH_END = "<!-- bench:end -->"
# A few headline ratios, in README.md.
HEADLINE_START = "<!-- bench:headline:start -->"
HEADLINE_END = "<!-- bench:headline:end -->"
# The identity section, inside the above: `--only tenants` replaces just this.
TENANTS_START = "<!-- bench:tenants:start -->"
TENANTS_END = "<!-- bench:tenants:end -->"
MiB = 1 << 20


@dataclass
class Check:
    what: str
    value: float  # the measured ratio or number
    target: str
    met: bool | None  # None: not measurable in this run


def ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else float("nan")


def checks(s: dict[str, Sample], extra: dict[str, Any]) -> list[Check]:
    def faster(ours: str, base: str, target: float) -> Check:
        value = ratio(s[base].p50, s[ours].p50)
        met = None if math.isnan(value) else value >= target
        return Check(f"{ours} vs {base} (p50, x faster)", value, f">= {target:g}x", met)

    def at_most(ours: str, base: str, target: float) -> Check:
        value = ratio(s[ours].p50, s[base].p50)
        met = None if math.isnan(value) else value <= target
        return Check(f"{ours} / {base} (p50)", value, f"<= {target:g}", met)

    out = [
        # Issue 17's targets, in its order.
        faster("exec", "exec_run", 20),
        at_most("exec", "host", 1.0),
        faster("read", "get_archive", 20),
        *throughput(s["load8"], s["exec_run_tput"], 600, s.get("load8_plain")),
        idle_session(extra, 8),
        # Earlier targets, still held.
        faster("write", "put_archive", 20),
        at_most("warm", "create_start", 1 / 8),
        at_most("cold", "create_start", 1.15),
        at_most("close", "kill_remove", 1.2),
        *many_sessions(s["load64"]),
    ]
    for peer in ("cli", "llm_exec"):
        value = ratio(s[peer].p50, s["exec"].p50)
        out.append(Check(f"exec vs {peer} (p50, x faster)", value, "reported", None))
    value = ratio(s["llm_open"].p50, s["warm"].p50)
    out.append(Check("warm vs llm_open (p50, x faster)", value, "reported", None))
    if "obs_on" in s and "obs_off" in s:
        value = ratio(s["obs_on"].p50, s["obs_off"].p50)
        out.append(Check("obs_on / obs_off (p50)", value, "reported", None))
    if "ts_exec" in s and "py_exec" in s:
        value = ratio(s["ts_exec"].p50, s["py_exec"].p50)
        out.append(Check("ts_exec / py_exec (p50)", value, "reported", None))
    if "warm_default" in s:
        value = ratio(s["warm_default"].p50, s["create_start"].p50)
        out.append(Check("warm_default / create_start (p50)", value, "reported", None))
    rss = extra.get("daemon_rss_64_bytes", 0) / MiB
    out.append(Check("daemon RSS with 64 sessions (MiB)", rss, "reported", None))
    return out


def throughput(
    ours: Sample, exec_run: Sample, at_least: float, plain: Sample | None = None
) -> list[Check]:
    """toolrt's calls/s, judged; beside SDK exec_run's of the same shape and,
    when measured, the same daemon's with the features off, reported."""
    rate = ours.calls_per_s
    shape = ours.name.removeprefix("toolrt ")
    found = [
        Check(
            f"throughput, {shape} (calls/s)",
            rate,
            f">= {at_least:g}",
            None if not ours.n else rate >= at_least,
        ),
        Check(
            f"throughput, {shape}, vs exec_run the same shape (x)",
            ratio(rate, exec_run.calls_per_s),
            "reported",
            None,
        ),
    ]
    if plain is not None:
        value = ratio(rate, plain.calls_per_s) if ours.n and plain.n else float("nan")
        found.append(Check(f"throughput, {shape}, features on / off (x)", value, "reported", None))
    return found


def idle_session(extra: dict[str, Any], at_most_mib: float) -> Check:
    idle = extra.get("idle_session_bytes", 0) / MiB
    return Check(
        "idle session memory (MiB, agent included)",
        idle,
        f"<= {at_most_mib:g}",
        None if not idle else idle <= at_most_mib,
    )


def many_sessions(sample: Sample) -> list[Check]:
    """No result lost or crossed, and a bounded tail, with that many sessions."""
    spread = ratio(sample.p99, sample.p50)
    shape = sample.name.removeprefix("toolrt ")
    return [
        Check(
            f"{shape}: failed/lost/crossed results",
            sample.failures,
            "0",
            sample.n > 0 and sample.failures == 0,
        ),
        Check(f"{shape}: p99 / p50", spread, "<= 10", spread <= 10),
    ]


def reported(s: dict[str, Sample], pairs: tuple[tuple[str, str], ...]) -> list[Check]:
    """`key / base` of p50s for each pair, reported and not judged."""
    return [
        Check(f"{key} / {base} (p50)", ratio(s[key].p50, s[base].p50), "reported", None)
        for key, base in pairs
    ]


def identity_checks(s: dict[str, Sample]) -> list[Check]:
    """Ratios of p50s, reported and not judged: the issue asks for the figures."""
    return reported(
        s,
        (
            ("auth_token", "auth_none"),
            ("auth_audit", "auth_none"),
            ("flood_free", "quiet_free"),
            ("flood_quota", "quiet_quota"),
            ("flood_polite", "quiet_polite"),
        ),
    )


def identity_section(
    s: dict[str, Sample], names: dict[str, str], measured: str, flooders: int, rate: int
) -> list[str]:
    """Markdown of the identity figures: the ratios, then every sample."""
    return [
        "### Identity: a token's cost, a flooding neighbour",
        "",
        measured,
        "",
        "`shell true` on three daemons in interleaved blocks: no authentication "
        "configured; `auth.tokens_file` and a bearer token on every call; the same "
        "plus `audit_log`. Then tenant bob's `shell true` in blocks alternating with "
        f"tenant alice idle and alice flooding ({flooders} threads in a process of "
        "their own, one session each, calling back to back and ignoring refusals), "
        "on a daemon with no tenant tables, on one giving alice "
        f"`calls_per_second = {rate}`, and on one more with that quota where alice "
        "waits as each refusal says. A tenant calling before the time its refusal "
        "named is held until then; while two tenants call, each starts one call "
        "at once freely and the rest take turns (`fair_start_slots`). Reported, "
        "not judged: the flooding client runs on the same host, and on one of few "
        "CPUs a flood (of calls or of refusals) competes with the neighbour for them.",
        "",
        *target_table(identity_checks(s), names),
        "",
        *latency_table(s),
    ]


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x * 1e3:.2f}"


def latency_table(samples: dict[str, Sample]) -> list[str]:
    lines = [
        "| operation | n | p50 ms | p90 ms | p99 ms | calls/s | note |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for sample in samples.values():
        rate = f"{sample.calls_per_s:.0f}" if sample.calls_per_s else ""
        note = sample.note + (f" ({sample.failures} failed)" if sample.failures else "")
        lines.append(
            f"| {sample.name} | {sample.n} | {_ms(sample.p50)} | {_ms(sample.p90)} | "
            f"{_ms(sample.p99)} | {rate} | {note} |"
        )
    return lines


def target_table(found: list[Check], names: dict[str, str]) -> list[str]:
    lines = ["| target | measured | wanted | |", "|---|---:|---|---|"]
    for check in found:
        what = check.what
        for key, label in names.items():
            what = re.sub(rf"\b{key}\b", label, what)
        value = "-" if math.isnan(check.value) else f"{check.value:.3g}"
        mark = {True: "met", False: "**MISSED**", None: "n/a"}[check.met]
        lines.append(f"| {what} | {value} | {check.target} | {mark} |")
    return lines


# The README's summary: the checks a newcomer asks about first.
HEADLINE = (
    "exec vs exec_run (p50, x faster)",
    "exec / host (p50)",
    "read vs get_archive (p50, x faster)",
    "warm / create_start (p50)",
    "cold / create_start (p50)",
    "throughput, 8 sessions x 8 callers (calls/s)",
    "throughput, 8 sessions x 8 callers, features on / off (x)",
    "exec vs llm_exec (p50, x faster)",
)


def headline(found: list[Check], names: dict[str, str], measured: str) -> list[str]:
    """The README's few ratios, in HEADLINE's order, from the run's target checks."""
    by_what = {check.what: check for check in found}
    picked = [by_what[what] for what in HEADLINE if what in by_what]
    return [measured, "", *target_table(picked, names)]


def curve_table(curve: list[tuple[int, Sample]]) -> list[str]:
    lines = [
        "| concurrent sessions | calls | calls/s | p50 ms | p90 ms | p99 ms | failed |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for sessions, s in curve:
        lines.append(
            f"| {sessions} | {s.n} | {s.calls_per_s:.0f} | {_ms(s.p50)} | {_ms(s.p90)} | "
            f"{_ms(s.p99)} | {s.failures} |"
        )
    return lines


def plot(curve: list[tuple[int, Sample]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    xs = [c for c, _ in curve]
    fig, left = plt.subplots(figsize=(7, 4))
    for q, style in ((0.5, "o-"), (0.9, "s--"), (0.99, "^:")):
        left.plot(xs, [s.pct(q) * 1e3 for _, s in curve], style, label=f"p{int(q * 100)} ms")
    left.set_xscale("log", base=2)
    left.set_xticks(xs, [str(x) for x in xs])
    left.set_xlabel("concurrent sessions (one caller each)")
    left.set_ylabel("Execute latency, ms")
    right = left.twinx()
    right.plot(xs, [s.calls_per_s for _, s in curve], "k-", lw=2, label="calls/s")
    right.set_ylabel("calls/s")
    handles = left.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    labels = left.get_legend_handles_labels()[1] + right.get_legend_handles_labels()[1]
    left.legend(handles, labels, loc="upper left")
    left.set_title("toolrt: shell `echo` latency and throughput")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def splice(page: Path, markdown: str, start: str = BENCH_START, end: str = BENCH_END) -> bool:
    """Replace what lies between the markers `start` and `end` of a page."""
    if not page.exists():
        return False
    text = page.read_text()
    if start not in text or end not in text:
        return False
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    page.write_text(f"{head}{start}\n{markdown}\n{end}{tail}")
    return True


def observability_line(s: dict[str, Sample]) -> str:
    """What metrics and tracing cost per call (p50 on minus p50 off, same run)."""
    on, off = s.get("obs_on"), s.get("obs_off")
    if on is None or off is None or not on.n or not off.n:
        return "Metrics and tracing: not measured in this run."
    return (
        f"Metrics and tracing: `shell true` p50 {off.p50 * 1e3:.2f} ms with both off (the "
        f"default), {on.p50 * 1e3:.2f} ms with Prometheus metrics served and every span sent "
        f"to an OTLP/HTTP collector on the host ({(on.p50 - off.p50) * 1e3:+.2f} ms per call)."
    )
