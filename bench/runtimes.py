"""What gVisor costs: `shell true` and a cold CreateSession under each OCI
runtime the engine has registered (runc, runsc), side by side.

One daemon offers both (`runtimes`), each sample's calls interleave with
the other runtime's, so a noisy host's drift hits them alike.
"""

from __future__ import annotations

import contextlib
import functools
import tempfile
import time

import docker

from bench.ours import Daemon, shell
from bench.stats import Sample, interleave

RUNTIMES = ("runc", "runsc")


def registered() -> list[str]:
    """Those of RUNTIMES this engine knows."""
    client = docker.from_env(timeout=60)
    try:
        known = client.info().get("Runtimes") or {}
    finally:
        client.close()
    return [r for r in RUNTIMES if r in known]


def _create_close(d: Daemon, runtime: str, created: Sample) -> None:
    started = time.perf_counter()
    sid = d.client.create_session(runtime=runtime).id
    created.times.append(time.perf_counter() - started)
    shell(d.client, sid, "true")
    d.client.close_session(sid)


def measure(instance: str, log_path: str, quick: bool, daemons: list[Daemon]) -> dict[str, Sample]:
    """Samples `exec_<runtime>` and `create_<runtime>` for every registered runtime."""
    names = registered()
    s: dict[str, Sample] = {}
    for name in names:
        s[f"exec_{name}"] = Sample(f"toolrt Execute shell true under {name}")
        s[f"create_{name}"] = Sample(f"toolrt CreateSession (cold) under {name}")
    if not names:
        return s
    with tempfile.NamedTemporaryFile("w", suffix=".toml", prefix="toolrt-bench-") as config:
        config.write(f'runtime = "{names[0]}"\nruntimes = {list(names)!r}\n'.replace("'", '"'))
        config.flush()
        d = Daemon(f"{instance}-rt", 0, log_path, config=config.name)
    daemons.append(d)
    with contextlib.ExitStack() as stack:
        ids = {name: stack.enter_context(d.client.session(runtime=name)).id for name in names}
        interleave(
            3 if quick else 10,
            [
                (s[f"exec_{name}"], 10, functools.partial(shell, d.client, ids[name], "true"))
                for name in names
            ],
        )
    for _ in range(4 if quick else 12):
        for name in names:
            _create_close(d, name, s[f"create_{name}"])
    d.stop()
    return s


def table(s: dict[str, Sample]) -> list[str]:
    """runtime | shell true p50/p90 | CreateSession p50/p90, in ms."""
    lines = [
        "| runtime | `shell true` p50 ms | p90 ms | cold CreateSession p50 ms | p90 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in RUNTIMES:
        run, made = s.get(f"exec_{name}"), s.get(f"create_{name}")
        if run is None or made is None:
            lines.append(f"| {name} | not registered with this engine | | | |")
            continue
        lines.append(
            f"| {name} | {run.p50 * 1e3:.1f} | {run.p90 * 1e3:.1f} | "
            f"{made.p50 * 1e3:.0f} | {made.p90 * 1e3:.0f} |"
        )
    return lines
