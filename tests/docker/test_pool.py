"""The warm pool against the real engine: one session per container, refill,
limits at claim, admission, reaping, and no growth when creating fails.

These pools have a fixed size (`pool_min = pool_size`); the adaptive sizing
is followed in tests/unit/test_pool_sizing.py."""

from __future__ import annotations

import time

import grpc
import pytest

from runtime.client import Client, ToolrtRpcError
from tests.conftest import config_for_test
from tests.helpers import containers_of, wait_for

pytestmark = pytest.mark.docker

MiB = 1 << 20


def pooled_ids(docker_client, instance: str) -> set[str]:
    return {c.labels["toolrt.session"] for c in containers_of(docker_client, instance)}


def test_each_claim_gets_its_own_container_and_the_pool_refills(make_daemon, docker_client):
    running = make_daemon(pool_size=2, pool_min=2)
    pool = running.daemon.core.manager.pool
    wait_for(lambda: pool.ready() == 2)
    warm_ids = pooled_ids(docker_client, running.instance)
    assert len(warm_ids) == 2
    for container in containers_of(docker_client, running.instance):
        assert "toolrt.tenant" not in container.labels  # any tenant may claim it

    with Client(running.target) as client:
        first = client.create_session()
        second = client.create_session()
        # The daemon records the owner: the labels cannot change.
        assert first.tenant == second.tenant == "default"
        # Both came from the pool, each with a container of its own.
        assert {first.id, second.id} == warm_ids
        assert client.call(first.id, "shell", {"command": "echo one > /workspace/f"}).ok
        other = client.call(second.id, "shell", {"command": "cat /workspace/f"})
        assert other.ok and other.output["exit_code"] != 0  # nothing shared

        # Refilled behind the claims with fresh containers.
        wait_for(lambda: pool.ready() == 2)
        now = pooled_ids(docker_client, running.instance)
        assert len(now) == 4 and warm_ids < now

        client.close_session(first.id)
        client.close_session(second.id)
        # Destroyed with their sessions, never returned to the pool.
        remaining = pooled_ids(docker_client, running.instance)
        assert remaining == now - warm_ids
        assert pool.ready() == 2


@pytest.mark.runc_only(
    "runsc cannot update a running container's limits: such a claim drops the warm sandbox "
    "and goes cold"
)
def test_limits_are_set_at_claim_and_unmatched_requests_go_cold(make_daemon, docker_client):
    running = make_daemon(pool_size=1, pool_min=1)
    pool = running.daemon.core.manager.pool
    wait_for(lambda: pool.ready() == 1)
    (warm_id,) = pooled_ids(docker_client, running.instance)
    with Client(running.target) as client:
        with client.session(limits={"memory_bytes": 400 * MiB, "pids": 77, "cpus": 0.5}) as s:
            assert s.id == warm_id
            host = docker_client.containers.get(f"toolrt-{s.id}").attrs["HostConfig"]
            assert host["Memory"] == 400 * MiB
            assert host["PidsLimit"] == 77
            assert host["NanoCpus"] == 500_000_000
            assert s.shell("cat /sys/fs/cgroup/pids/pids.max").output["stdout"].strip() == "77"

        wait_for(lambda: pool.ready() == 1)
        (warm_id,) = pooled_ids(docker_client, running.instance)
        # A workspace size or labels fixed at creation that the pool lacks: cold.
        with client.session(limits={"workspace_bytes": 32 * MiB}) as s:
            assert s.id != warm_id
        with client.session(labels={"team": "a"}) as s:
            assert s.id != warm_id
            assert docker_client.containers.get(f"toolrt-{s.id}").labels["team"] == "a"
        assert pooled_ids(docker_client, running.instance) == {warm_id}


def test_pool_counts_toward_max_sessions(make_daemon, docker_client):
    running = make_daemon(pool_size=2, pool_min=2, max_sessions=3)
    pool = running.daemon.core.manager.pool
    wait_for(lambda: pool.ready() == 2)
    with Client(running.target) as client:
        a = client.create_session()  # warm; refill brings the total to 3
        wait_for(lambda: pool.count() == 2 and pool.ready() == 2)
        b = client.create_session()  # warm; no room left to refill
        c = client.create_session()  # warm
        assert pool.count() == 0
        with pytest.raises(ToolrtRpcError) as err:
            client.create_session()
        assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert len(containers_of(docker_client, running.instance)) == 3
        client.close_session(a.id)
        # Room again: the pool refills the freed slot rather than exceeding the cap.
        wait_for(lambda: pool.ready() == 1)
        time.sleep(0.5)
        assert len(containers_of(docker_client, running.instance)) == 3
        for s in (b, c):
            client.close_session(s.id)


def test_pool_is_reaped_at_shutdown_and_by_the_next_start(make_daemon, docker_client):
    running = make_daemon(pool_size=2, pool_min=2)
    wait_for(lambda: running.daemon.core.manager.pool.ready() == 2)
    running.stop()
    assert containers_of(docker_client, running.instance) == []

    # A daemon that never shut down (its process killed, say) leaves its pool
    # behind; the next start under the same name removes it before filling anew.
    config = config_for_test(pool_size=2, pool_min=2)
    previous = make_daemon(instance=config.instance, pool_size=2, pool_min=2)
    wait_for(lambda: previous.daemon.core.manager.pool.ready() == 2)
    left = pooled_ids(docker_client, config.instance)
    assert len(left) == 2
    successor = make_daemon(instance=config.instance, pool_size=1, pool_min=1)
    wait_for(lambda: successor.daemon.core.manager.pool.ready() == 1)
    now = pooled_ids(docker_client, config.instance)
    assert len(now) == 1 and not now & left
    successor.stop()
    previous.stop()
    assert containers_of(docker_client, config.instance) == []


def test_pool_does_not_grow_when_creating_fails(make_daemon, docker_client):
    running = make_daemon(pool_size=3, pool_min=3, image="toolrt-missing:nope")
    pool = running.daemon.core.manager.pool
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        # After the first failure a single fill probes at a time.
        assert pool.count() <= 3
        assert len(containers_of(docker_client, running.instance)) <= 3
        time.sleep(0.1)
    assert pool.ready() == 0
    assert pool.count() <= 1
    assert containers_of(docker_client, running.instance) == []
    with Client(running.target) as client:
        with pytest.raises(ToolrtRpcError) as err:
            client.create_session()
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_pool_with_the_engine_down_keeps_serving(make_daemon, tmp_path):
    engine = f"unix://{tmp_path}/no-engine.sock"
    running = make_daemon(pool_size=2, pool_min=2, docker_host=engine)
    pool = running.daemon.core.manager.pool
    time.sleep(1.5)
    assert pool.ready() == 0
    assert pool.count() <= 1
    with Client(running.target) as client:
        with pytest.raises(ToolrtRpcError) as err:
            client.create_session()
        assert err.value.code == grpc.StatusCode.UNAVAILABLE
