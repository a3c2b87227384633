"""What restarts cost: re-adopting N sessions, and writing state on each call.

    python -m bench.restarts [--sizes 1,16,64] [--calls 200]

Re-adoption: a daemon process with N sessions is killed (SIGKILL) and a new
one started on the same state; the time its re-adoption took (its log says),
and the time from its start until ListSessions (which waits for
re-adoption) lists all N, beside the time a daemon with no sessions takes to
answer. Per call: p50 of a sequential `shell true` with
the journal written through to the state database and with it off.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import docker

from runtime.client import Client
from tests.conftest import TEST_LABEL, config_for_test, start_daemon
from tests.helpers import DaemonProcess, containers_of, free_port


def started(instance: str, port: int, tmp: Path, name: str) -> tuple[DaemonProcess, float]:
    """A daemon process and the seconds until it answered."""
    begun = time.monotonic()
    daemon = DaemonProcess(instance, port, tmp / f"{name}.log", tmp / "state", "keep")
    return daemon, time.monotonic() - begun


def readopt(size: int, engine: docker.DockerClient) -> tuple[float, float, float]:
    """(seconds from the new daemon's start until all `size` sessions are
    served again, seconds a bare start takes, seconds re-adoption itself took)."""
    instance, port = f"bench-readopt-{uuid.uuid4().hex[:8]}", free_port()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        first, bare = started(instance, port, tmp, "first")
        try:
            with Client(first.target) as client:
                for _ in range(size):
                    client.create_session(labels={TEST_LABEL: "1"})
            first.kill()
            begun = time.monotonic()
            second, _ = started(instance, free_port(), tmp, "second")
            try:
                with Client(second.target) as client:
                    listed = client.list_sessions()
                    elapsed = time.monotonic() - begun
                    assert len(listed) == size, (len(listed), size)
                adopting = re.search(
                    r"re-adopted \d+ of \d+ session\(s\) in (\d+) ms", second.log()
                )
                assert adopting, second.log()
            finally:
                second.kill()
        finally:
            first.kill()
            for container in containers_of(engine, instance):
                container.remove(force=True)
    return elapsed, bare, int(adopting.group(1)) / 1000


def call_p50(calls: int, durable: bool) -> float:
    """p50 ms of a sequential `shell true`, the journal written through or not."""
    running = start_daemon(config_for_test(state_dir=tempfile.mkdtemp(), shutdown="close"))
    try:
        with Client(running.target) as client:
            session = client.create_session()
            if not durable:
                running.daemon.core.manager.get("default", session.id).journal.sink = None
            times = []
            for i in range(calls + 10):
                begun = time.perf_counter()
                assert client.call(session.id, "shell", {"command": "true"}, call_id=f"c{i}").ok
                if i >= 10:  # warm-up
                    times.append((time.perf_counter() - begun) * 1000)
            client.close_session(session.id)
        return statistics.median(times)
    finally:
        running.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,16,64")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    engine = docker.from_env()
    for size in (int(s) for s in args.sizes.split(",")):
        elapsed, bare, adopting = readopt(size, engine)
        print(
            f"re-adopt {size:3d} session(s): {adopting:6.2f} s of re-adoption; all served "
            f"{elapsed:.2f} s after the new daemon's process started (a bare start: {bare:.2f} s)"
        )
    # Interleaved, so that other load on the host hits both alike.
    on, off = [], []
    for _ in range(2):
        on.append(call_p50(args.calls, durable=True))
        off.append(call_p50(args.calls, durable=False))
    print(
        f"shell true p50: {statistics.median(on):.2f} ms with state written, "
        f"{statistics.median(off):.2f} ms without ({args.calls} calls, 2 runs each)"
    )


if __name__ == "__main__":
    main()
