"""Idle sessions are reaped, and their sandboxes with them (no engine)."""

from __future__ import annotations

import time

import pytest

from runtime.client import Client
from tests.helpers import agent_processes, is_open, wait_for


@pytest.mark.parametrize("backend", ["local", "fake"])
def test_an_idle_session_is_reaped_with_its_sandbox(make_daemon, backend):
    running = make_daemon(backend=backend, reaper_interval_s=0.1)
    with Client(running.target) as client:
        session = client.create_session(idle_seconds=1)
        assert session.idle_seconds == 1
        started = time.monotonic()
        wait_for(lambda: not is_open(client, session.id), timeout=10)
        assert 0.9 < time.monotonic() - started < 5
        assert client.list_sessions() == []
    if backend == "local":
        assert agent_processes() == []
    else:
        assert running.daemon.core.backend.sandboxes == {}


def test_calls_count_as_activity(make_daemon):
    running = make_daemon(backend="fake", reaper_interval_s=0.1)
    with Client(running.target) as client:
        busy = client.create_session(idle_seconds=1)
        idle = client.create_session(idle_seconds=1)
        for _ in range(6):
            assert client.call(busy.id, "shell", {"command": "true"}).ok
            time.sleep(0.3)
        assert is_open(client, busy.id) and not is_open(client, idle.id)
        wait_for(lambda: not is_open(client, busy.id), timeout=10)
