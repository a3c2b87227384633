"""The Admin* RPCs and the commands built on them (`toolrt status`, `toolrt top`),
on the fake backend: who may call them, what they count, what they print."""

from __future__ import annotations

import grpc
import pytest

from runtime.client import Client
from runtime.errors import EngineUnavailable
from runtime.sandbox.backend import EngineInfo
from runtime.sandbox.fake import FakeBackend
from tests.conftest import config_for_test, start_daemon
from tests.helpers import toolrt
from tests.unit.secured import status_of


def workload(client: Client) -> str:
    """Two sessions, four calls (one failed), one session closed; the kept one's id."""
    with client.session() as s:
        assert s.shell("true").ok
        assert s.call("read_file", {"path": "/workspace/none"}).error_code == "NOT_FOUND"
    kept = client.create_session()
    assert client.call(kept.id, "list_files", {}).ok
    assert client.call(kept.id, "shell", {"command": "true"}).ok
    return kept.id


def test_stats_count_sessions_pool_and_calls(make_daemon):
    running = make_daemon(backend="fake", pool_size=2, pool_min=1)
    with Client(running.target) as client:
        kept = workload(client)
        stats = client.admin_stats()
        assert stats.healthy and stats.engine_error == ""
        assert stats.engine == "FakeBackend"
        assert stats.instance == running.instance and stats.version
        assert stats.uptime_seconds > 0
        assert dict(stats.sessions) == {"ready": 1}
        assert dict(stats.sessions_created) == {"pool": 2, "cold": 0}
        assert dict(stats.sessions_closed)["closed"] == 1
        assert stats.calls_total == 4
        assert dict(stats.errors) == {"NOT_FOUND": 1}
        assert stats.calls_per_second == pytest.approx(4 / 60)
        (profile,) = stats.pool
        assert profile.image == "toolrt-sandbox:default" and profile.target >= 1
        views = client.admin_sessions()
        assert [v.session.id for v in views] == [kept]
        (view,) = views
        assert view.last_tool == "shell" and view.session.calls == 2
        assert view.active_calls == 0 and view.last_used_at > view.session.created_at
        # The fake backend cannot tell a sandbox's usage.
        (view,) = client.admin_sessions(usage=True)
        assert (view.cpu_seconds, view.memory_bytes) == (-1, -1)


def test_only_admins_call_admin_rpcs_and_see_every_tenant(secured):
    alice, bob, ops = secured.client("alice"), secured.client("bob"), secured.client("ops")
    a = alice.create_session()
    b = bob.create_session()
    for tenant in (alice, bob):
        refused = status_of(tenant.admin_stats)
        assert refused is not None and refused[0] == grpc.StatusCode.PERMISSION_DENIED
        assert "admin" in refused[1]
        assert status_of(tenant.admin_sessions)[0] == grpc.StatusCode.PERMISSION_DENIED
    views = ops.admin_sessions()
    assert {(v.session.id, v.session.tenant) for v in views} == {(a.id, "alice"), (b.id, "bob")}
    assert [v.session.id for v in ops.admin_sessions(tenant="bob")] == [b.id]
    assert ops.admin_stats().sessions["ready"] == 2
    # An admin token administers; it runs nothing.
    assert status_of(ops.create_session)[0] == grpc.StatusCode.PERMISSION_DENIED
    stranger = secured.client(token="")
    assert status_of(stranger.admin_stats)[0] == grpc.StatusCode.UNAUTHENTICATED


def test_status_prints_one_screen_and_exits_0_when_healthy(make_daemon):
    running = make_daemon(backend="fake", pool_size=1)
    with Client(running.target) as client:
        workload(client)
    done = toolrt("status", "--target", running.target)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("toolrt ") and lines[0].endswith(": healthy")
    assert running.instance in lines[0]
    text = done.stdout
    for expected in ("uptime", "engine    FakeBackend", "1 open (ready 1)", "pool 2"):
        assert expected in text, text
    assert "toolrt-sandbox:default" in text and "errors    NOT_FOUND 1" in text
    assert "4 since start" in text
    assert len(lines) <= 24

    as_json = toolrt("status", "--json", "--target", running.target)
    assert as_json.returncode == 0 and '"healthy": true' in as_json.stdout


class EngineDown(FakeBackend):
    async def describe_engine(self) -> EngineInfo:
        msg = "the Docker engine at /nowhere.sock does not answer"
        raise EngineUnavailable(msg)


def test_status_exits_nonzero_when_the_engine_is_down():
    running = start_daemon(config_for_test(), backend=EngineDown())
    try:
        done = toolrt("status", "--target", running.target)
    finally:
        running.stop()
    assert done.returncode == 1, done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert first.endswith("UNHEALTHY: the Docker engine at /nowhere.sock does not answer")


def test_status_without_admin_rights_says_so(secured):
    env = {"TOOLRT_TARGET": secured.daemon.target, "TOOLRT_TLS_CA": secured.pki.cert_file}
    done = toolrt("status", TOOLRT_TOKEN=secured.tokens["alice"], **env)
    assert done.returncode == 2
    assert "PERMISSION_DENIED" in done.stderr and "--admin" in done.stderr
    ok = toolrt("status", TOOLRT_TOKEN=secured.tokens["ops"], **env)
    assert ok.returncode == 0, ok.stderr


def test_top_once_shows_every_session(make_daemon):
    running = make_daemon(backend="fake")
    with Client(running.target) as client:
        kept = workload(client)
        done = toolrt("top", "--once", "--target", running.target, COLUMNS="140")
    assert done.returncode == 0, done.stderr
    header, columns, *rows = [line for line in done.stdout.splitlines() if line.strip()]
    assert header.startswith("toolrt ") and "sessions 1/" in header
    for name in ("SESSION", "TENANT", "AGE", "CALLS", "CPU%", "MEM", "LAST TOOL", "STATE"):
        assert name in columns
    (row,) = rows
    assert row.split()[:2] == [kept[:12], "default"]
    assert "shell" in row and "ready" in row
