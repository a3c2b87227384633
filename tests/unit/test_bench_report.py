"""bench/report.py: which targets `make bench` judges, and how it writes them."""

from __future__ import annotations

import queue
from pathlib import Path

import pytest

from bench import ours, programs, report, shares
from bench.run import NAMES
from bench.stats import Sample

MS = 1e-3


def _sample(name: str, p50_ms: float, calls_per_s: float = 0.0) -> Sample:
    return Sample(name, times=[p50_ms * MS] * 5, calls_per_s=calls_per_s)


def _run(load8_per_s: float = 700.0, exec_ms: float = 2.0) -> dict[str, Sample]:
    """Samples as bench.run collects them, every target met by default."""
    return {
        "exec": _sample("toolrt Execute shell true", exec_ms),
        "exec_run": _sample("SDK exec_run true", 60),
        "host": _sample("host subprocess bash -c true", 2.5),
        "write": _sample("toolrt write_file 1 KiB", 1),
        "put_archive": _sample("SDK put_archive 1 KiB", 30),
        "read": _sample("toolrt read_file 1 MiB", 2),
        "get_archive": _sample("SDK get_archive 1 MiB", 50),
        "warm": _sample("toolrt warm CreateSession + first Execute", 20),
        "create_start": _sample("raw create+start", 200),
        "cold": _sample("toolrt CreateSession (cold)", 210),
        "close": _sample("toolrt CloseSession", 100),
        "kill_remove": _sample("raw kill+remove", 100),
        "cli": _sample("CLI docker exec true", 80),
        "llm_exec": Sample("llm-sandbox execute_command true", note="not installed"),
        "llm_open": Sample("llm-sandbox open+first command", note="not installed"),
        "exec_run_tput": _sample("SDK exec_run 8 sessions x 8 callers", 400, 20),
        "load8": _sample("toolrt 8 sessions x 8 callers", 90, load8_per_s),
        "load8_plain": _sample("toolrt 8 sessions x 8 callers, features off", 85, 750),
        "load64": _sample("toolrt 64 sessions x 1 caller", 100, 600),
    }


EXTRA = {"idle_session_bytes": 6 << 20, "daemon_rss_64_bytes": 90 << 20}


def test_issue_17_targets_come_first_as_its_table_says() -> None:
    found = report.checks(_run(), EXTRA)
    assert [(c.what, c.target) for c in found[:7]] == [
        ("exec vs exec_run (p50, x faster)", ">= 20x"),
        ("exec / host (p50)", "<= 1"),
        ("read vs get_archive (p50, x faster)", ">= 20x"),
        ("throughput, 8 sessions x 8 callers (calls/s)", ">= 600"),
        ("throughput, 8 sessions x 8 callers, vs exec_run the same shape (x)", "reported"),
        ("throughput, 8 sessions x 8 callers, features on / off (x)", "reported"),
        ("idle session memory (MiB, agent included)", "<= 8"),
    ]
    assert [c.met for c in found[:7]] == [True, True, True, True, None, None, True]


def test_earlier_targets_and_reported_peers_are_kept() -> None:
    whats = {c.what for c in report.checks(_run(), EXTRA)}
    for kept in (
        "write vs put_archive (p50, x faster)",
        "warm / create_start (p50)",
        "cold / create_start (p50)",
        "close / kill_remove (p50)",
        "64 sessions x 1 caller: failed/lost/crossed results",
        "64 sessions x 1 caller: p99 / p50",
        "exec vs cli (p50, x faster)",
        "exec vs llm_exec (p50, x faster)",
        "warm vs llm_open (p50, x faster)",
        "daemon RSS with 64 sessions (MiB)",
    ):
        assert kept in whats


@pytest.mark.parametrize(("per_s", "met"), [(600.0, True), (599.0, False)])
def test_throughput_is_judged_in_calls_per_second_not_as_a_ratio(per_s: float, met: bool) -> None:
    by_what = {c.what: c for c in report.checks(_run(load8_per_s=per_s), EXTRA)}
    judged = by_what["throughput, 8 sessions x 8 callers (calls/s)"]
    assert (judged.value, judged.met) == (per_s, met)
    beside = by_what["throughput, 8 sessions x 8 callers, vs exec_run the same shape (x)"]
    assert beside.value == pytest.approx(per_s / 20)
    assert beside.met is None


def test_the_features_cost_is_reported_as_the_throughput_with_them_over_without() -> None:
    by_what = {c.what: c for c in report.checks(_run(load8_per_s=600.0), EXTRA)}
    cost = by_what["throughput, 8 sessions x 8 callers, features on / off (x)"]
    assert (cost.value, cost.target, cost.met) == (pytest.approx(0.8), "reported", None)
    # A run without the features-off daemon has no such row, not a made-up one.
    s = _run()
    del s["load8_plain"]
    assert not [c for c in report.checks(s, EXTRA) if "features on / off" in c.what]


def test_alternating_loads_weigh_a_drift_on_both_daemons_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    on, off = object(), object()
    order: list[object] = []
    # The host slows down run by run: 400, 300, 200, 100 calls/s for 2 s each.
    # The first run, on `off` alone, warms it and is not counted.
    rates = iter((999, 400, 300, 200, 100))

    def load(d: object, sessions: int, seconds: float, callers: int) -> tuple[Sample, list[str]]:
        assert (sessions, seconds, callers) == (8, 2.0, 8)
        order.append(d)
        rate = next(rates)
        sample = Sample("toolrt 8 sessions x 8 callers", times=[0.01] * int(rate * seconds))
        sample.failures = 1 if rate == 100 else 0
        return sample, []

    monkeypatch.setattr(ours, "load", load)
    with_features, without = ours.alternating_loads(on, off, 8, 4.0, 8)  # type: ignore[arg-type]
    assert order == [off, on, off, off, on]
    assert (with_features.calls_per_s, without.calls_per_s) == (250, 250)
    assert (with_features.n, without.n) == (1000, 1000)
    assert (with_features.failures, without.failures) == (1, 0)
    assert without.name == "toolrt 8 sessions x 8 callers, features off"


def test_the_typescript_client_is_reported_as_a_ratio_to_the_python_client() -> None:
    s = _run()
    s["ts_exec"] = _sample("TypeScript client Execute shell true", 6)
    s["py_exec"] = _sample("Python client Execute shell true", 4)
    found = [c for c in report.checks(s, EXTRA) if "ts_exec" in c.what]
    assert [(c.what, c.value, c.target, c.met) for c in found] == [
        ("ts_exec / py_exec (p50)", 1.5, "reported", None)
    ]
    assert report.target_table(found, NAMES)[2].startswith(
        "| TypeScript client shell true / Python client shell true (p50) | 1.5 |"
    )


def test_execute_slower_than_the_host_misses() -> None:
    by_what = {c.what: c for c in report.checks(_run(exec_ms=3.0), EXTRA)}
    assert by_what["exec / host (p50)"].met is False


def test_target_table_names_the_baselines() -> None:
    table = "\n".join(report.target_table(report.checks(_run(), EXTRA), NAMES))
    assert "| Execute shell true / host subprocess (p50) | 0.8 | <= 1 | met |" in table
    assert "throughput, 8 sessions x 8 callers, vs SDK exec_run the same shape (x)" in table
    # A peer that could not be measured shows as such, never as a number.
    assert "| Execute shell true vs llm-sandbox execute_command (p50, x faster) | - |" in table


def test_splice_replaces_only_between_the_markers(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text(f"head\n{report.BENCH_START}\nold\n{report.BENCH_END}\ntail\n")
    assert report.splice(page, "new")
    assert page.read_text() == f"head\n{report.BENCH_START}\nnew\n{report.BENCH_END}\ntail\n"


def test_the_readme_headline_keeps_a_few_ratios_in_their_order() -> None:
    lines = report.headline(report.checks(_run(), EXTRA), NAMES, "Measured today.")
    assert lines[0] == "Measured today."
    rows = [line for line in lines if line.startswith("| ") and "measured" not in line]
    assert len(rows) == len(report.HEADLINE)
    assert rows[0].startswith("| Execute shell true vs SDK exec_run (p50, x faster) | 30 |")


def test_exhaustion_rows_give_bob_beside_alice_as_ratios_to_alone() -> None:
    found = {
        "transfers": shares.Outcome(
            alone=_sample("bob alone", 5),
            beside=Sample("bob beside", times=[10 * MS] * 4, failures=2, note="UNAVAILABLE"),
            alice={"ok": 3, "RESOURCE_EXHAUSTED": 17},
            transfers=Sample("bob transfers", failures=1, note="DEADLINE_EXCEEDED"),
        ),
        "large_args": shares.Outcome(
            alone=_sample("bob alone", 5),
            beside=_sample("bob beside", 5),
            alice="RuntimeError: the attacker could not start",
        ),
    }
    rows = [line for line in shares.section(found, "Measured today.") if line.startswith("| ")]
    transfers, large = rows[1], rows[2]
    assert transfers.startswith(f"| {shares.Transfers.label} | 5.0 | 10.0 | 2.00 |")
    assert "| 2 (UNAVAILABLE) | RESOURCE_EXHAUSTED 17, ok 3 |" in transfers
    assert "1 failed (DEADLINE_EXCEEDED)" in transfers
    # An attacker that failed says why instead of counts; the ratios still show.
    assert "| 1.00 |" in large and "RuntimeError: the attacker could not start" in large


def test_exhaustion_quick_plan_is_bounded_below_the_full_one() -> None:
    quick, full = shares.Plan.of(quick=True), shares.Plan.of(quick=False)
    assert quick.seconds < full.seconds
    assert quick.snapshots * quick.blob_mib <= full.snapshots * full.blob_mib


class _Ended:
    """A process that has already ended."""

    def is_alive(self) -> bool:
        return False

    def join(self, timeout: float | None = None) -> None:
        pass


def test_an_attacker_that_ends_without_its_report_is_not_waited_for() -> None:
    out: queue.Queue[object] = queue.Queue()
    plan = shares.Plan.of(quick=True)
    assert shares._collect(out, _Ended(), plan) == "no report"
    out.put({"ok": 2})
    out.put("done")
    assert shares._collect(out, _Ended(), plan) == {"ok": 2}


def test_the_programs_rows_are_each_rpc_over_its_baseline_reported() -> None:
    s = {key: _sample(label, 10) for key, label in programs.LABELS.items()}
    s["prog_exec"] = _sample("toolrt Exec true", 3)
    s["prog_shell"] = _sample("toolrt Execute shell true", 4)
    s["read_big"] = _sample("toolrt ReadFile 100 MiB", 5)
    found = report.reported(s, programs.PAIRS)
    assert [(c.what, c.value, c.met) for c in found] == [
        ("prog_exec / prog_shell (p50)", 0.75, None),
        ("write_big / upload_big (p50)", 1.0, None),
        ("write_big / put_big (p50)", 1.0, None),
        ("read_big / download_big (p50)", 0.5, None),
        ("read_big / get_big (p50)", 0.5, None),
    ]
    table = "\n".join(programs.section(s, "Measured today."))
    assert "| Exec true / Execute shell true (p50) | 0.75 | reported | n/a |" in table
    assert "| ReadFile 100 MiB / get_archive 100 MiB (p50) | 0.5 | reported | n/a |" in table
