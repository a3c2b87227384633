"""Chaos: real daemon processes killed under load, a client retrying the same ids.

Each case checks, as a client sees it: every call id gets exactly one final
result (after retries with the same id), side effects happen exactly once
(lines appended by the command are counted), workspaces are intact, no
container is left once the sessions close, and a daemon's memory and open
descriptors stay flat across cycles.

A few cycles run in `make test`; `make chaos` runs the marked ones with
TOOLRT_CHAOS_CYCLES (default 20). Engine restarts (dockerd) are not done:
other users share this engine, and restoring it exactly is not possible
from a test.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import psutil
import pytest

from runtime.client import Client, Result, ToolrtRpcError
from tests.conftest import TEST_LABEL
from tests.helpers import DaemonProcess, containers_of, free_port, wait_for

pytestmark = pytest.mark.docker

CYCLES = int(os.environ.get("TOOLRT_CHAOS_CYCLES", "20"))
# Codes a client retries with the same call id: the daemon is down or restarting.
RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}
APPEND = "echo {cid} >> /workspace/log; sleep 0.3; echo done"


@dataclass
class Fleet:
    """One daemon instance, restarted again and again on one port and state_dir."""

    instance: str
    port: int
    tmp: Any
    daemon: DaemonProcess | None = None
    restarts: int = 0
    samples: list[tuple[int, int]] = field(default_factory=list)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, shutdown: str = "keep") -> None:
        self.restarts += 1
        log = self.tmp / f"daemon-{self.restarts}.log"
        self.daemon = DaemonProcess(self.instance, self.port, log, self.tmp / "state", shutdown)

    def kill9(self) -> None:
        assert self.daemon is not None
        self.daemon.proc.send_signal(signal.SIGKILL)
        self.daemon.proc.wait(10)

    def sample(self) -> None:
        """The running daemon's RSS and open descriptors."""
        assert self.daemon is not None
        process = psutil.Process(self.daemon.proc.pid)
        self.samples.append((process.memory_info().rss, process.num_fds()))

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.kill()


@pytest.fixture
def fleet(tmp_path, docker_client) -> Iterator[Fleet]:
    fleet = Fleet(f"test-chaos-{uuid.uuid4().hex[:8]}", free_port(), tmp_path)
    yield fleet
    fleet.stop()
    for container in containers_of(docker_client, fleet.instance):
        container.remove(force=True)


def call_until_answered(
    client: Client, sid: str, cid: str, command: str, deadline_s: float = 120
) -> Result:
    """The call's one result, retrying with the same id while the daemon is away."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return client.call(sid, "shell", {"command": command}, call_id=cid)
        except ToolrtRpcError as exc:
            if exc.code not in RETRYABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def kill_cycles(fleet: Fleet, docker_client: Any, cycles: int, sessions: int = 2) -> None:
    rng = random.Random(12)
    fleet.start()
    with Client(fleet.target) as client:
        sids = [client.create_session(labels={TEST_LABEL: "1"}).id for _ in range(sessions)]
        for sid in sids:
            assert client.call(sid, "write_file", {"path": "keep.txt", "content": sid}).ok
        issued: dict[str, list[str]] = {sid: [] for sid in sids}
        results: dict[str, Result] = {}
        errors: list[BaseException] = []

        def loop(sid: str, cycle: int) -> None:
            try:
                for k in range(3):
                    cid = f"{sid[:8]}-{cycle}-{k}"
                    issued[sid].append(cid)
                    results[cid] = call_until_answered(client, sid, cid, APPEND.format(cid=cid))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        for cycle in range(cycles):
            workers = [threading.Thread(target=loop, args=(sid, cycle)) for sid in sids]
            for worker in workers:
                worker.start()
            time.sleep(rng.uniform(0.1, 0.8))
            fleet.kill9()  # mid-call, mid-write, mid-answer: wherever it lands
            fleet.start()
            for worker in workers:
                worker.join(180)
            assert not errors, errors
            fleet.sample()
        # Every call answered once, ok; every side effect exactly once.
        for sid in sids:
            assert all(results[cid].ok for cid in issued[sid]), [
                (cid, results[cid].error_code, results[cid].error_message)
                for cid in issued[sid]
                if not results[cid].ok
            ]
            log = client.call(sid, "read_file", {"path": "log", "limit": 100000})
            lines = log.output["content"].split()
            assert sorted(lines) == sorted(issued[sid])  # each once, none lost
            kept = client.call(sid, "read_file", {"path": "keep.txt"})
            assert kept.output["content"] == sid  # the workspace is intact
            # A retry now, of an old id, answers from the journal.
            first = issued[sid][0]
            again = call_until_answered(client, sid, first, APPEND.format(cid=first))
            assert again.output == results[first].output
        for sid in sids:
            assert client.close_session(sid) == "closed"
    assert containers_of(docker_client, fleet.instance) == []
    check_flat(fleet.samples)


def check_flat(samples: list[tuple[int, int]]) -> None:
    """Memory and descriptors of each restarted daemon after its cycle: no
    growth with the number of cycles (the state and journal it loads grow)."""
    if len(samples) < 3:
        return
    first_rss = min(rss for rss, _ in samples[:2])
    first_fds = max(fds for _, fds in samples[:2])
    last_rss, last_fds = samples[-1]
    assert last_rss < first_rss * 1.5 + (32 << 20), samples
    assert last_fds <= first_fds + 16, samples


def test_kill_9_during_calls_a_few_cycles(fleet, docker_client):
    kill_cycles(fleet, docker_client, cycles=3)


@pytest.mark.chaos
def test_kill_9_during_calls_many_cycles(fleet, docker_client):
    kill_cycles(fleet, docker_client, cycles=CYCLES)


@pytest.mark.chaos
def test_sigterm_keep_then_close(fleet, docker_client):
    fleet.start(shutdown="keep")
    with Client(fleet.target) as client:
        sid = client.create_session(labels={TEST_LABEL: "1"}).id
        outcome: dict[str, Any] = {}

        def long_call() -> None:
            try:
                client.call(sid, "shell", {"command": "sleep 2; echo kept"}, call_id="t")
            except ToolrtRpcError as exc:
                outcome["code"] = exc.code

        caller = threading.Thread(target=long_call)
        caller.start()
        time.sleep(0.7)
        assert fleet.daemon is not None
        fleet.daemon.proc.send_signal(signal.SIGTERM)
        assert fleet.daemon.proc.wait(30) == 0
        caller.join(30)
        assert outcome["code"] == grpc.StatusCode.UNAVAILABLE
        assert docker_client.containers.get(f"toolrt-{sid}").status == "running"
        fleet.start(shutdown="close")
        result = call_until_answered(client, sid, "t", "sleep 2; echo kept")
        assert result.ok and result.output["stdout"] == "kept\n"
        fleet.daemon.proc.send_signal(signal.SIGTERM)
        assert fleet.daemon.proc.wait(30) == 0
    assert containers_of(docker_client, fleet.instance) == []
    fleet.start()
    with Client(fleet.target) as client:
        closed = client.get_session(sid)
        assert (closed.state, closed.closed_reason) == ("closed", "shutdown")


@pytest.mark.chaos
@pytest.mark.parametrize("how", ["kill", "remove"])
def test_a_container_killed_from_outside_is_lost_and_the_rest_served(fleet, docker_client, how):
    fleet.start()
    with Client(fleet.target) as client:
        doomed, other = (client.create_session(labels={TEST_LABEL: "1"}).id for _ in range(2))
        container = docker_client.containers.get(f"toolrt-{doomed}")
        if how == "kill":
            container.kill()
        else:
            container.remove(force=True)

        def closed() -> bool:
            return client.get_session(doomed).state == "closed"

        wait_for(closed, timeout=10)
        assert client.get_session(doomed).closed_reason == "sandbox_lost"
        assert client.call(other, "shell", {"command": "true"}).ok
        # While the daemon is down the same happens: found lost at the next start.
        fleet.kill9()
        docker_client.containers.get(f"toolrt-{other}").kill()
        fleet.start()
        wait_for(lambda: client.get_session(other).state == "closed", timeout=30)
        assert client.get_session(other).closed_reason == "sandbox_lost"
    wait_for(lambda: containers_of(docker_client, fleet.instance) == [], timeout=30)


@pytest.mark.chaos
def test_a_crash_in_the_middle_of_readoption(fleet, docker_client):
    fleet.start()
    with Client(fleet.target) as client:
        sids = [client.create_session(labels={TEST_LABEL: "1"}).id for _ in range(8)]
        for sid in sids:
            assert client.call(sid, "shell", {"command": "echo a > /workspace/f"}).ok
        fleet.kill9()
        fleet.start()
        time.sleep(0.05)  # adoption has begun, not ended
        fleet.kill9()
        fleet.start()
        assert sorted(s.id for s in client.list_sessions()) == sorted(sids)
        for sid in sids:
            read = client.call(sid, "read_file", {"path": "f"})
            assert read.output["content"] == "a\n"
            assert client.close_session(sid) == "closed"
    assert containers_of(docker_client, fleet.instance) == []
