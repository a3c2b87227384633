"""The python tool's engine beside a Jupyter kernel: `python -m bench.engines`.

The `python` tool runs its own small REPL server (runtime/agent/interpreter.py);
peers run a Jupyter kernel (ipykernel driven by jupyter_client). Both are
measured here on this host, outside any sandbox, on the bench's Python, so
only the engines differ: the first call (start to the answer of `1+1`), a
warm `1+1` (p50 of many) and the idle process's memory (RSS) after them.
The kernel needs `ipykernel` and `jupyter_client` (bench/setup.sh installs
them in bench/.venv); without them its rows say so.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

INTERPRETER = Path(__file__).resolve().parent.parent / "runtime" / "agent" / "interpreter.py"
WARM_CALLS = 100
MiB = 1 << 20


def own_server() -> tuple[float, float, float]:
    """(first call s, warm p50 s, idle RSS MiB) of the tool's REPL server."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(INTERPRETER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    requests, answers = proc.stdin, proc.stdout

    def run(code: str) -> dict[str, object]:
        requests.write(json.dumps({"code": code}).encode() + b"\n")
        requests.flush()
        while True:
            answer: dict[str, object] = json.loads(answers.readline())
            if "ready" not in answer and "stream" not in answer:
                return answer

    try:
        assert run("1+1")["result"] == "2"
        first = time.perf_counter() - started
        warm = []
        for _ in range(WARM_CALLS):
            t = time.perf_counter()
            run("1+1")
            warm.append(time.perf_counter() - t)
        rss = psutil.Process(proc.pid).memory_info().rss / MiB
    finally:
        proc.kill()
        proc.wait()
    return first, statistics.median(warm), rss


def jupyter_kernel() -> tuple[float, float, float] | str:
    """The same figures of an ipykernel, or why it cannot be measured."""
    try:
        from jupyter_client.manager import start_new_kernel
    except ImportError:
        return "jupyter_client is not installed (bench/setup.sh installs it)"
    started = time.perf_counter()
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        reply = client.execute_interactive("1+1", timeout=60, output_hook=lambda msg: None)
        assert reply["content"]["status"] == "ok"
        first = time.perf_counter() - started
        warm = []
        for _ in range(WARM_CALLS):
            t = time.perf_counter()
            client.execute_interactive("1+1", timeout=60, output_hook=lambda msg: None)
            warm.append(time.perf_counter() - t)
        pid = manager.provisioner.process.pid  # type: ignore[union-attr]
        rss = psutil.Process(pid).memory_info().rss / MiB
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    return first, statistics.median(warm), rss


def main() -> int:
    rows = [("the python tool's REPL server", own_server()), ("ipykernel", jupyter_kernel())]
    print("| engine | first call (ms) | warm `1+1` p50 (ms) | idle RSS (MiB) |")
    print("|---|---:|---:|---:|")
    for name, figures in rows:
        if isinstance(figures, str):
            print(f"| {name} | {figures} | | |")
            continue
        first, warm, rss = figures
        print(f"| {name} | {first * 1000:.0f} | {warm * 1000:.2f} | {rss:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
