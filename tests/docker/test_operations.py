"""What an operator sees of sandboxes on the real engine: the engine's name and
each sandbox's CPU and memory (AdminListSessions, `toolrt top`), and a warm
first session counted as such."""

from __future__ import annotations

import pytest

from runtime.client import Client
from tests.helpers import toolrt, wait_for

pytestmark = pytest.mark.docker


def test_top_shows_each_sandboxes_cpu_and_memory(make_daemon):
    running = make_daemon(pool_size=1)
    pool = running.daemon.core.manager.pool
    wait_for(lambda: pool.ready() == 1)
    with Client(running.target) as client, client.session() as s:
        assert s.shell("python3 -c 'sum(range(3_000_000))'").ok
        stats = client.admin_stats()
        assert stats.healthy and stats.engine.startswith("docker ")
        assert stats.sessions_created["pool"] == 1
        (view,) = client.admin_sessions(usage=True)
        assert view.session.id == s.id and view.last_tool == "shell"
        assert view.cpu_seconds > 0.05
        assert 1 << 20 < view.memory_bytes < s.info.limits.memory_bytes
        shown = toolrt("top", "--once", "--target", running.target, COLUMNS="160")
    assert shown.returncode == 0, shown.stderr
    (row,) = [line for line in shown.stdout.splitlines() if s.id[:12] in line]
    assert "M " in row and "shell" in row
