"""Sessions: create, get, list, close; losing a sandbox; daemon start and stop."""

from __future__ import annotations

import io
import signal
import subprocess
import tarfile
import threading
import time
import uuid
from typing import Any

import docker
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import Client, ToolrtRpcError
from tests.conftest import TEST_LABEL
from tests.helpers import DaemonProcess, containers_of, free_port, serve_command, wait_for

pytestmark = pytest.mark.docker


def test_get_list_close_and_close_again(client, docker_client):
    session = client.create_session()
    assert session.state == "ready" and session.image == "toolrt-sandbox:default"
    assert session.expires_at == 0 or session.expires_at > session.created_at
    assert client.get_session(session.id).id == session.id
    assert [s.id for s in client.list_sessions()] == [session.id]

    assert client.close_session(session.id) == "closed"
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(f"toolrt-{session.id}")
    assert client.close_session(session.id) == "closed"  # idempotent
    closed = client.get_session(session.id)  # remembered for an hour, with why
    assert (closed.state, closed.closed_reason) == ("closed", "closed")
    assert closed.image == session.image and closed.created_at == session.created_at
    assert client.list_sessions() == []
    with pytest.raises(ToolrtRpcError) as err:
        client.call(session.id, "shell", {"command": "true"})
    assert err.value.code == grpc.StatusCode.NOT_FOUND


def test_unknown_session_and_empty_call_id(client, session):
    with pytest.raises(ToolrtRpcError) as err:
        client.close_session("does-not-exist")
    assert err.value.code == grpc.StatusCode.NOT_FOUND
    request = pb.ExecuteRequest(session_id=session.id, call=pb.ToolCall(name="shell"))
    with pytest.raises(grpc.RpcError) as rpc_err:
        client.stub.Execute(request)
    assert rpc_err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_request_limits_are_clamped_and_labels_cannot_override(client, docker_client):
    with client.session(
        limits={"memory_bytes": 1 << 50, "pids": 100},
        labels={"toolrt.session": "forged", "team": "a"},
    ) as session:
        container = docker_client.containers.get(f"toolrt-{session.id}")
        assert container.labels["toolrt.session"] == session.id
        assert container.labels["team"] == "a"
        assert container.attrs["HostConfig"]["PidsLimit"] == 100
        assert session.info.limits.memory_bytes < 1 << 50
        assert container.attrs["HostConfig"]["Memory"] == session.info.limits.memory_bytes


def test_container_killed_mid_call_is_sandbox_lost(client, docker_client):
    session = client.create_session()
    container = docker_client.containers.get(f"toolrt-{session.id}")
    threading.Timer(1.0, container.kill).start()
    started = time.monotonic()
    result = client.call(session.id, "shell", {"command": "sleep 60"})
    assert result.error_code == "SANDBOX_LOST"
    assert time.monotonic() - started < 10
    # The session is closed and its container gone.
    wait_for(lambda: not client.list_sessions())

    def container_gone() -> bool:
        try:
            docker_client.containers.get(f"toolrt-{session.id}")
        except docker.errors.NotFound:
            return True
        return False

    wait_for(container_gone)


def test_an_image_with_no_shell_is_served_and_its_tools_say_what_is_missing(client, docker_client):
    # Nothing but /etc/hostname: no python3, no shell, no /etc/passwd. The
    # static agent runs anyway; a tool whose program the image lacks fails
    # with an error naming it, and the session serves on.
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        info = tarfile.TarInfo("etc/hostname")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"no\n"))
        for folder in ("workspace", "tmp", "proc", "dev", "sys"):
            made = tarfile.TarInfo(folder)
            made.type, made.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(made)
    name = f"toolrt-test-noshell:{uuid.uuid4().hex[:8]}"
    repository, tag = name.split(":")
    docker_client.api.import_image_from_data(data.getvalue(), repository=repository, tag=tag)
    try:
        with client.session(image=name) as session:
            shell = session.shell("echo hi")
            assert shell.error_code == "NOT_FOUND", shell
            assert "/bin/sh" in shell.error_message
            written = session.call("write_file", {"path": "/workspace/a.txt", "content": "x"})
            assert written.ok, written
            assert session.call("read_file", {"path": "/workspace/a.txt"}).output["content"] == "x"
        with pytest.raises(ToolrtRpcError) as err:
            client.create_session(image="toolrt-no-such-image:1")
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "never pulls" in err.value.details
    finally:
        docker_client.images.remove(name, force=True)


def test_engine_down_is_unavailable(make_daemon, tmp_path):
    running = make_daemon(docker_host=f"unix://{tmp_path}/no-engine.sock", docker_timeout_s=3)
    with Client(running.target) as client, pytest.raises(ToolrtRpcError) as err:
        client.create_session()
    assert err.value.code == grpc.StatusCode.UNAVAILABLE
    assert "engine" in err.value.details


def test_daemon_also_serves_on_a_unix_socket(make_daemon, tmp_path):
    path = tmp_path / "toolrt.sock"
    make_daemon(unix_socket=str(path))
    with Client(f"unix:{path}") as client, client.session() as session:
        assert session.shell("echo via-unix").output["stdout"] == "via-unix\n"


def test_health_and_reflection_are_served(daemon):
    channel = grpc.insecure_channel(daemon.target)
    health = health_pb2_grpc.HealthStub(channel)
    reply = health.Check(health_pb2.HealthCheckRequest(service="toolruntime.v1.ToolRuntime"))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    names = {s.name for r in replies for s in r.list_services_response.service}
    assert "toolruntime.v1.ToolRuntime" in names
    channel.close()


# -- the daemon as a separate process ---------------------------------------------


@pytest.fixture
def instance(docker_client):
    name = f"test-{uuid.uuid4().hex[:10]}"
    yield name
    for container in containers_of(docker_client, name):
        container.remove(force=True)


def test_sigterm_answers_in_flight_calls_and_leaves_no_container(docker_client, instance, tmp_path):
    daemon = DaemonProcess(instance, free_port(), tmp_path / "daemon.log")
    try:
        with Client(daemon.target) as client:
            sessions = [client.create_session(labels={TEST_LABEL: "1"}) for _ in range(2)]
            results = {}

            def call(sid: str) -> None:
                results[sid] = client.call(sid, "shell", {"command": "sleep 60"})

            threads = [threading.Thread(target=call, args=(s.id,)) for s in sessions]
            for t in threads:
                t.start()
            time.sleep(1.0)
            daemon.proc.send_signal(signal.SIGTERM)
            for t in threads:
                t.join(20)
            assert daemon.proc.wait(20) == 0, daemon.log()
        assert {r.error_code for r in results.values()} == {"SANDBOX_LOST"}, results
        assert all("shutting down" in r.error_message for r in results.values())
        assert containers_of(docker_client, instance) == []
    finally:
        daemon.kill()


def test_orphans_of_a_killed_daemon_are_reaped_at_next_start(docker_client, instance, tmp_path):
    # Containers with no state to re-adopt them by (here: the state is gone) are removed.
    port = free_port()
    first = DaemonProcess(instance, port, tmp_path / "first.log", tmp_path / "lost-state")
    try:
        with Client(first.target) as client:
            client.create_session(labels={TEST_LABEL: "1"})
            client.create_session(labels={TEST_LABEL: "1"})
    finally:
        first.kill()
    assert len(containers_of(docker_client, instance)) == 2
    second = DaemonProcess(instance, port, tmp_path / "second.log")
    try:
        assert containers_of(docker_client, instance) == []
        assert "removed 2 sandbox(es) left by a previous run" in second.log()
    finally:
        second.kill()


def test_a_second_daemon_on_the_same_state_dir_or_address_refuses_to_start(
    docker_client, instance, tmp_path
):
    state = tmp_path / "state"
    first = DaemonProcess(instance, free_port(), tmp_path / "first.log", state)

    def second(target: str, state_dir: Any) -> subprocess.CompletedProcess[str]:
        argv, env = serve_command(instance, target, state_dir)
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)

    try:
        with Client(first.target) as client, client.session(labels={TEST_LABEL: "1"}) as s:
            same_state = second(f"127.0.0.1:{free_port()}", state)
            assert same_state.returncode != 0
            assert f"in use by another toolrt daemon (pid {first.proc.pid})" in same_state.stderr
            same_address = second(first.target, tmp_path / "other-state")
            assert same_address.returncode != 0
            assert "cannot listen there" in same_address.stderr, same_address.stderr
            # The first daemon lost nothing: its session and its clients.
            assert s.call("shell", {"command": "echo still"}).output["stdout"] == "still\n"
            assert len(containers_of(docker_client, instance)) == 1
    finally:
        first.kill()
    # The lock goes with its process, however it ended.
    third = DaemonProcess(instance, free_port(), tmp_path / "third.log", state)
    try:
        with Client(third.target) as client:
            assert client.list_sessions() is not None
    finally:
        third.proc.send_signal(signal.SIGTERM)
        third.proc.wait(30)
