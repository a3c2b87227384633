"""Lifecycle limits through gRPC: TTL and idle reaping, admission, call budget."""

from __future__ import annotations

import threading
import time

import docker
import grpc
import pytest

from runtime.client import Client, ToolrtRpcError
from runtime.errors import EngineUnavailable
from runtime.sessions import manager as manager_module
from tests.helpers import containers_of, is_open, wait_for

pytestmark = pytest.mark.docker


def container_gone(docker_client: docker.DockerClient, session_id: str) -> bool:
    try:
        docker_client.containers.get(f"toolrt-{session_id}")
    except docker.errors.NotFound:
        return True
    return False


def test_ttl_defaults_and_clamping_are_reported(make_daemon):
    running = make_daemon(
        default_ttl_seconds=600, max_ttl_seconds=1200, default_idle_seconds=60, max_idle_seconds=90
    )
    with Client(running.target) as client:
        with client.session() as default:
            info = default.info
            assert info.ttl_seconds == 600 and info.idle_seconds == 60
            assert info.expires_at == pytest.approx(info.created_at + 600)
        with client.session(ttl_seconds=10**9, idle_seconds=10**9) as clamped:
            assert clamped.info.ttl_seconds == 1200 and clamped.info.idle_seconds == 90
            fetched = client.get_session(clamped.id)
            assert fetched.expires_at == pytest.approx(fetched.created_at + 1200)
        with client.session(ttl_seconds=30, idle_seconds=5) as asked:
            assert asked.info.ttl_seconds == 30 and asked.info.idle_seconds == 5


def test_ttl_closes_the_session_and_its_running_call(make_daemon, docker_client):
    running = make_daemon(reaper_interval_s=0.2)
    with Client(running.target) as client:
        session = client.create_session(ttl_seconds=3)
        started = time.monotonic()
        result = client.call(session.id, "shell", {"command": "sleep 60"})
        assert result.error_code == "SANDBOX_LOST"
        assert "lifetime" in result.error_message and "ttl 3 s" in result.error_message
        assert time.monotonic() - started < 30
        assert not is_open(client, session.id)
        wait_for(lambda: container_gone(docker_client, session.id))
        assert client.list_sessions() == []


def test_idle_sessions_are_reaped_but_activity_and_running_calls_count(make_daemon, docker_client):
    running = make_daemon(reaper_interval_s=0.2)
    with Client(running.target) as client:
        busy = client.create_session(idle_seconds=4)
        idle = client.create_session(idle_seconds=4)
        # A call running longer than the idle limit keeps its session open.
        result = client.call(busy.id, "shell", {"command": "sleep 6; echo done"})
        assert result.ok and result.output["stdout"] == "done\n"
        wait_for(lambda: not is_open(client, idle.id))
        assert is_open(client, busy.id)
        wait_for(lambda: container_gone(docker_client, idle.id))
        # Calls more often than the limit keep it open too.
        for _ in range(8):
            assert client.call(busy.id, "shell", {"command": "true"}).ok
            time.sleep(0.5)
        assert is_open(client, busy.id)
        # Then, left alone, it goes.
        wait_for(lambda: not is_open(client, busy.id))
        wait_for(lambda: container_gone(docker_client, busy.id))
    assert containers_of(docker_client, running.instance) == []


def test_max_sessions_is_resource_exhausted(make_daemon, docker_client):
    running = make_daemon(max_sessions=1)
    with Client(running.target) as client:
        first = client.create_session()
        with pytest.raises(ToolrtRpcError) as err:
            client.create_session()
        assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "1 sessions are live" in err.value.details and "maximum is 1" in err.value.details
        assert len(containers_of(docker_client, running.instance)) == 1
        client.close_session(first.id)
        client.close_session(client.create_session().id)


def test_memory_floor_is_resource_exhausted(make_daemon, docker_client):
    running = make_daemon(min_available_memory_bytes=1 << 60)
    with Client(running.target) as client, pytest.raises(ToolrtRpcError) as err:
        client.create_session()
    assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "memory available" in err.value.details
    assert "min_available_memory_bytes" in err.value.details
    assert containers_of(docker_client, running.instance) == []


def test_call_budget_is_enforced_and_reported(client):
    with client.session(limits={"max_calls": 2}) as session:
        assert session.info.limits.max_calls == 2
        assert session.shell("true").ok
        assert session.shell("true").ok
        spent = session.shell("true")
        assert spent.error_code == "BUDGET_EXHAUSTED"
        assert "all of its 2 tool calls" in spent.error_message
        assert client.get_session(session.id).calls == 2


def test_reaper_and_client_closing_at_once_leave_nothing(make_daemon, docker_client):
    running = make_daemon(reaper_interval_s=0.1)
    with Client(running.target) as client:
        sessions = [client.create_session(ttl_seconds=1) for _ in range(3)]
        time.sleep(0.9)
        closers = [threading.Thread(target=client.close_session, args=(s.id,)) for s in sessions]
        for t in closers:
            t.start()
        for t in closers:
            t.join(30)
        wait_for(lambda: client.list_sessions() == [])
    wait_for(lambda: containers_of(docker_client, running.instance) == [])


@pytest.mark.runc_only("gVisor's kernel takes 12-19 s to boot on 0.1 CPUs, near create_timeout_s")
@pytest.mark.parametrize("cpus", [1e-9, 0.001, 0.05])
def test_a_cpu_share_too_small_to_start_a_sandbox_gets_the_smallest_that_does(
    client, docker_client, cpus
):
    """runc refuses a CFS quota under 1 ms (the create failed as UNAVAILABLE),
    one rounded down to 0 is no limit at all, and at 0.01 CPUs the sandbox
    did not start within create_timeout_s: all get 0.1 CPUs, and run."""
    with client.session(limits={"cpus": cpus}) as session:
        assert session.info.limits.cpus == pytest.approx(0.1)
        container = docker_client.containers.get(f"toolrt-{session.id}")
        assert container.attrs["HostConfig"]["NanoCpus"] == 100_000_000
        assert session.shell("true").ok


def test_a_sandbox_the_engine_failed_to_remove_is_removed_later(
    make_daemon, docker_client, monkeypatch
):
    """The engine failing the removal at close (a timeout under load) must
    not leave the container behind: the close says UNAVAILABLE, as it did,
    and the removal is tried again."""
    monkeypatch.setattr(manager_module, "REMOVAL_RETRIES_S", (0.2, 0.2))
    running = make_daemon()
    backend = running.daemon.core.backend
    remove = backend._remove_container
    failures = []

    def fail_once(session_id: str) -> None:
        if not failures:
            failures.append(session_id)
            msg = "remove sandbox: the Docker engine did not answer in time"
            raise EngineUnavailable(msg)
        remove(session_id)

    monkeypatch.setattr(backend, "_remove_container", fail_once)
    with Client(running.target) as client:
        session = client.create_session()
        assert containers_of(docker_client, running.instance) != []
        with pytest.raises(ToolrtRpcError, match="did not answer in time") as refused:
            client.close_session(session.id)
        assert refused.value.code == grpc.StatusCode.UNAVAILABLE
        assert client.list_sessions() == []
        client.close_session(session.id)  # closing again: already closed, fine
    assert failures == [session.id]
    wait_for(lambda: containers_of(docker_client, running.instance) == [])
