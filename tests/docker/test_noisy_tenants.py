"""On the real engine: a tenant flooding its proxy fills its own shares, and the others are served.

Two floods from sandboxes: connects refused by the policy in a loop (the
audit log stays a few lines a session and minute), and connections held
open beyond what the daemon's descriptors allow (a daemon under a lowered
RLIMIT_NOFILE keeps its reserve: another tenant's CreateSession and shell
succeed, and nothing answers INTERNAL).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import psutil
import pytest

from bench.shares import HOLD_LOOP, REFUSED_LOOP
from runtime.auth.tokens import create_token
from runtime.client import Client, ToolrtRpcError
from tests.conftest import TEST_LABEL
from tests.helpers import TEST_RUNTIME, DaemonProcess, containers_of, free_port

pytestmark = pytest.mark.docker


def run_in_background(session, name: str, script: str, seconds: float) -> str:
    assert session.call("write_file", {"path": f"/workspace/{name}", "content": script}).ok
    started = session.shell(f"python3 /workspace/{name} {seconds}", background=True)
    return str(started.output["process_id"])


def output_when_done(session, process: str, word: str) -> str:
    done = session.call(
        "process_output", {"process_id": process, "wait_for": word, "timeout_s": 60}
    )
    return str(done.output["output"])


def tenants(tmp_path: Path) -> tuple[Path, str, str]:
    tokens_file = tmp_path / "tokens"
    _, alice = create_token(tokens_file, "alice")
    _, bob = create_token(tokens_file, "bob")
    return tokens_file, alice, bob


def test_a_connect_flood_writes_a_few_audit_lines_and_others_are_served(make_daemon, tmp_path):
    tokens_file, alice, bob = tenants(tmp_path)
    audit = tmp_path / "audit.jsonl"
    daemon = make_daemon(
        auth={"tokens_file": str(tokens_file)},
        audit_log=str(audit),
        network={"allow_max": ["*.test:*"]},
        shares={"audit_network_records": 5},
    )
    with Client(daemon.target, token=alice) as hers, Client(daemon.target, token=bob) as his:
        floods = [hers.session(network={"allow": ["web.test"]}) for _ in range(2)]
        try:
            processes = [run_in_background(s, "flood.py", REFUSED_LOOP, 3) for s in floods]
            # Bob creates and calls beside the floods.
            with his.session() as session:
                assert session.shell("echo served").output["stdout"] == "served\n"
            made = [
                int(output_when_done(s, p, "connections").split()[-1])
                for s, p in zip(floods, processes, strict=True)
            ]
            ids = [s.id for s in floods]
        finally:
            for session in floods:
                session.close()

    async def flush() -> None:
        daemon.daemon.core.audit.flush_counts(everything=True)

    daemon.run(flush())
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    for session_id, connections in zip(ids, made, strict=True):
        network = [r for r in records if r["event"] == "network" and r["session_id"] == session_id]
        written = [r for r in network if r["decision"] != "repeated"]
        repeated = [r for r in network if r["decision"] == "repeated"]
        # Five lines as they happened, one for the rest of the minute: every
        # connection counted, a few lines however many there were. (A flood
        # of a few seconds may straddle a minute: then twice that.)
        assert connections > 40, connections
        assert len(repeated) in (1, 2), repeated
        assert 5 <= len(written) <= 5 * 2, written
        assert len(written) + sum(r["count"] for r in repeated) == connections
        assert {r["tenant"] for r in network} == {"alice"}
        assert sum(r["repeats"]["other"] for r in repeated) > 0
    assert any(r["event"] == "call" and r["tenant"] == "bob" for r in records)


class Sampler:
    """The most descriptors a process had open, sampled on a thread until `stop`."""

    def __init__(self, process: psutil.Process) -> None:
        self.first = self.peak = process.num_fds()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(process,), daemon=True)
        self._thread.start()

    def _run(self, process: psutil.Process) -> None:
        while not self._stopped.wait(0.02):
            self.peak = max(self.peak, process.num_fds())

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(5)


@pytest.fixture
def instance(docker_client) -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:10]}"
    yield name
    for container in containers_of(docker_client, name):
        container.remove(force=True)


def test_a_descriptor_flood_leaves_the_daemon_serving_others(instance, tmp_path):
    tokens_file, alice, bob = tenants(tmp_path)
    config = tmp_path / "toolrt.toml"
    config.write_text(
        f"""
runtime = "{TEST_RUNTIME}"
[auth]
tokens_file = "{tokens_file}"
[extra_labels]
"{TEST_LABEL}" = "1"
[network]
allow_max = ["*.test:*"]
max_connections = 1000
[shares]
proxy_connections = 5000
proxy_connections_per_tenant = 5000
fd_reserve = 100
"""
    )
    daemon = DaemonProcess(
        instance, free_port(), tmp_path / "daemon.log", config=config, nofile=300
    )
    statuses: list[grpc.StatusCode] = []
    try:
        fds = Sampler(psutil.Process(daemon.proc.pid))
        with Client(daemon.target, token=alice) as hers, Client(daemon.target, token=bob) as his:
            floods = [hers.session(network={"allow": ["web.test"]}) for _ in range(2)]
            processes = [run_in_background(s, "hold.py", HOLD_LOOP, 6) for s in floods]
            # Bob creates sessions and calls while the floods hold what they can.
            for _ in range(3):
                try:
                    with his.session() as session:
                        assert session.shell("echo served").output["stdout"] == "served\n"
                except ToolrtRpcError as exc:
                    statuses.append(exc.code)
            held = [output_when_done(s, p, "held") for s, p in zip(floods, processes, strict=True)]
            fds.stop()
            # Hers are served too once her connections end.
            assert floods[0].shell("echo again").output["stdout"] == "again\n"
            for session in floods:
                session.close()
        assert statuses == [], statuses
        print(f"daemon fds: {fds.first} before, {fds.peak} at most during the flood; {held}")
        log = daemon.log()
        assert "Traceback" not in log, log[-3000:]
    finally:
        daemon.proc.terminate()
        daemon.proc.wait(30)
