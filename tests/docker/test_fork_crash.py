"""A fork is all or none across a crash too: a daemon killed (SIGKILL) in
the middle of ForkSession leaves, after its restart, neither a session the
client never received nor a transient snapshot counting against the tenant."""

from __future__ import annotations

import signal
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.client import Client, ToolrtRpcError
from tests.helpers import DaemonProcess, containers_of, free_port, wait_for

pytestmark = pytest.mark.docker


def rows(state: Path, sql: str) -> list[tuple[Any, ...]]:
    """A query of the daemon's state database, from outside (read-only)."""
    conn = sqlite3.connect(f"file:{state / 'state.sqlite3'}?mode=ro", uri=True, timeout=5)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def fork_sessions(state: Path) -> int:
    return len(rows(state, "SELECT id FROM sessions WHERE spec LIKE '%\"fork\"%'"))


@pytest.fixture
def instance(docker_client) -> Iterator[str]:
    name = f"test-forkcrash-{uuid.uuid4().hex[:8]}"
    yield name
    for container in containers_of(docker_client, name):
        container.remove(force=True)


def test_a_fork_cut_short_by_sigkill_is_undone_at_restart(instance, docker_client, tmp_path):
    state, port = tmp_path / "state", free_port()
    daemon = DaemonProcess(instance, port, tmp_path / "first.log", state, shutdown="keep")
    try:
        with Client(daemon.target) as client:
            parent = client.create_session()
            assert client.call(parent.id, "shell", {"command": "echo kept > f"}).ok
            answered: list[Any] = []

            def fork() -> None:
                try:
                    answered.append(client.fork(parent.id, 16))
                except ToolrtRpcError as exc:
                    answered.append(exc)

            forking = threading.Thread(target=fork)
            forking.start()
            # Some of the fork's sessions are recorded, the fork has not answered.
            wait_for(lambda: fork_sessions(state) > 0 or answered, timeout=120, interval=0.02)
            daemon.proc.send_signal(signal.SIGKILL)
            daemon.proc.wait(10)
            forking.join(30)
        assert answered and isinstance(answered[0], ToolrtRpcError), answered
        assert fork_sessions(state) > 0
        assert rows(state, "SELECT count(*) FROM forks") == [(1,)]
    finally:
        daemon.kill()
    daemon = DaemonProcess(instance, port, tmp_path / "second.log", state, shutdown="close")
    try:
        with Client(daemon.target) as client:
            assert [s.id for s in client.list_sessions()] == [parent.id]
            result = client.call(parent.id, "shell", {"command": "cat f"})
            assert result.ok and result.output["stdout"] == "kept\n"
            assert client.list_snapshots() == []
            # The fork's containers go as ones no record names.
            wait_for(lambda: len(containers_of(docker_client, instance)) == 1, timeout=60)
        assert fork_sessions(state) == 0
        assert rows(state, "SELECT count(*) FROM forks") == [(0,)]
        assert rows(state, "SELECT kind, session_id FROM snapshots") == []
        blobs = [p for p in (state / "snapshots" / "blobs").rglob("*") if p.is_file()]
        assert blobs == []
        assert "removed 1 unfinished fork(s)" in daemon.log()
    finally:
        daemon.proc.send_signal(signal.SIGTERM)
        daemon.proc.wait(30)
