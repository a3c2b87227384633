"""The TypeScript client's `shell true` beside the Python client's, one daemon.

The TypeScript SDK's runner (sdk/typescript/build/bench/shell-true.js, built
by the SDK's tsc) makes its calls in turn in one session after a warm-up and
prints every call's time; the Python client makes as many in a session of its
own. Their blocks alternate, so a noisy host's drift hits both alike; node's
start-up is outside the times. Without node or the build the row says why.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.ours import Daemon, featured, shell
from bench.stats import Sample, timed

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "sdk" / "typescript" / "build" / "bench" / "shell-true.js"
BUILD = "make typescript-bench (npm ci and tsc in sdk/typescript)"
RUNNER_TIMEOUT_S = 300
# Unmeasured calls before each block, as many as the runner makes.
RUNNER_WARMUP = 20


def unavailable() -> str:
    """Why the TypeScript client cannot be measured here ("" when it can)."""
    if shutil.which("node") is None:
        return "no node on this host"
    if not RUNNER.is_file():
        return f"the SDK is not built: {BUILD}"
    return ""


def runner_times(d: Daemon, calls: int) -> list[float]:
    """One run of the runner against `d`: each call's seconds."""
    env = {**os.environ, "TOOLRT_TARGET": d.target, "TOOLRT_TOKEN": d.token}
    done = subprocess.run(
        ["node", str(RUNNER), str(calls)],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUNNER_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        msg = f"{RUNNER.name} failed ({done.returncode}): {done.stderr.strip()[-500:]}"
        raise RuntimeError(msg)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return [ms / 1e3 for ms in report["times_ms"]]


def measure(d: Daemon, quick: bool) -> tuple[Sample, Sample]:
    """`shell true` through the TypeScript client and the Python client."""
    rounds, calls = (3, 40) if quick else (5, 100)
    ts = Sample("TypeScript client Execute shell true")
    py = Sample("Python client Execute shell true (beside the TypeScript client)")
    why = unavailable()
    if why:
        ts.note = why
        return ts, py
    with d.client.session() as session:
        call = functools.partial(shell, d.client, session.id, "true")
        for _ in range(rounds):
            ts.times += runner_times(d, calls)
            py.times += timed(py.name, calls, call, warmup=RUNNER_WARMUP).times
    return ts, py


def alone(instance: str, log_path: str, quick: bool, daemons: list[Daemon]) -> dict[str, Sample]:
    """`measure` on a featured daemon of its own (`--only typescript`)."""
    with tempfile.TemporaryDirectory(prefix="toolrt-bench-") as tmp:
        d = featured(f"{instance}-ts", log_path, Path(tmp))
        daemons.append(d)
        s = dict(zip(("ts_exec", "py_exec"), measure(d, quick), strict=True))
        d.stop()
    return s
