"""Network egress through gRPC without an engine (fake backend): the policy's
checks and echo, the proxy variables commands get, the relay started, the
session's catalog, and the proxy gone with the session. Traffic through a
real sandbox is tests/docker/test_egress.py."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile

import grpc
import pytest

from runtime.agent import protocol
from runtime.client import Client, ToolrtRpcError
from runtime.sandbox.relay_dirs import socket_path
from tests.helpers import free_port


@pytest.fixture
def running(make_daemon):
    # A short directory: pytest's tmp_path can make socket paths too long.
    sockets = tempfile.mkdtemp(prefix="toolrt-egress-")
    yield make_daemon(
        backend="fake",
        network={"allow_max": ["*.test", "mirror.test:*"], "socket_dir": sockets},
    )
    shutil.rmtree(sockets, ignore_errors=True)


def test_a_session_with_network(running):
    backend = running.daemon.core.backend
    with Client(running.target) as client:
        session = client.create_session(
            network={"allow": ["a.test", "mirror.test:3141"], "max_connections": 1000}
        )
        assert list(session.network.allow) == ["a.test", "mirror.test:3141"]
        assert (session.network.max_bytes, session.network.max_connections) == (1 << 30, 64)
        assert isinstance(backend.requests[-1][1], protocol.RelayStart)
        path = socket_path(running.daemon.config, session.id)
        assert os.stat(path).st_mode & 0o777 == 0o600
        client.call(session.id, "shell", {"command": "true"})
        [(_, request)] = [r for r in backend.requests if isinstance(r[1], protocol.Exec)]
        assert request.env["HTTPS_PROXY"] == "http://127.0.0.1:3128"
        assert request.env["no_proxy"] == "localhost,127.0.0.1"
        tools = client.list_tools(dialect="openai", session_id=session.id)
        shell = next(t for t in tools if t["function"]["name"] == "shell")
        assert "a.test, mirror.test:3141 (ports 80 and 443" in shell["function"]["description"]
        client.close_session(session.id)
        assert not os.path.exists(path)
        assert running.daemon.core.egress.proxy(session.id) is None


def test_a_session_without_network_has_no_proxy(running):
    backend = running.daemon.core.backend
    with Client(running.target) as client:
        session = client.create_session()
        client.call(session.id, "shell", {"command": "true"})
        [(_, request)] = [r for r in backend.requests if isinstance(r[1], protocol.Exec)]
        assert not any("proxy" in name.lower() for name in request.env)
        assert not any(isinstance(r[1], protocol.RelayStart) for r in backend.requests)
        assert running.daemon.core.egress.proxy(session.id) is None
        client.close_session(session.id)


@pytest.mark.parametrize(
    ("allow", "code", "says"),
    [
        (["pypi.org"], grpc.StatusCode.PERMISSION_DENIED, "'pypi.org' is outside"),
        (["a.test:8080"], grpc.StatusCode.PERMISSION_DENIED, "'a.test:8080' is outside"),
        (["*"], grpc.StatusCode.PERMISSION_DENIED, "'*' is outside"),
        (["10.0.0.5"], grpc.StatusCode.INVALID_ARGUMENT, "IP address"),
        (["a.test/path"], grpc.StatusCode.INVALID_ARGUMENT, "network.allow[0]"),
    ],
)
def test_patterns_outside_the_ceiling_or_malformed(running, allow, code, says):
    with Client(running.target) as client:
        with pytest.raises(ToolrtRpcError) as refused:
            client.create_session(network={"allow": allow})
        assert refused.value.code == code
        assert says in refused.value.details
        assert client.list_sessions() == []


def test_list_tools_of_an_unknown_session_is_not_found(running):
    with Client(running.target) as client, pytest.raises(ToolrtRpcError) as missing:
        client.list_tools(session_id="nope")
    assert missing.value.code == grpc.StatusCode.NOT_FOUND


def through_proxy(path: str, request: bytes) -> bytes:
    """What the session's proxy answers `request` (as the sandbox's relay sends it)."""
    with socket.socket(socket.AF_UNIX) as relay:
        relay.settimeout(10)
        relay.connect(path)
        relay.sendall(request)
        answer = b""
        while chunk := relay.recv(65536):
            answer += chunk
        return answer


def test_a_pin_to_loopback_never_leads_to_the_daemons_own_ports(make_daemon):
    # With no authentication a loopback peer is an admin: the proxy must
    # never be the way from a sandbox to toolrt's gRPC or metrics.
    grpc_port, metrics_port = free_port(), free_port()
    sockets = tempfile.mkdtemp(prefix="toolrt-egress-")
    running = make_daemon(
        backend="fake",
        listen=f"127.0.0.1:{grpc_port}",
        metrics_listen=f"127.0.0.1:{metrics_port}",
        network={
            "allow_max": [f"mirror.test:{grpc_port}", f"mirror.test:{metrics_port}"],
            "hosts": {"mirror.test": "127.0.0.1"},
            "socket_dir": sockets,
        },
    )
    try:
        with Client(running.target) as client:
            allow = [f"mirror.test:{grpc_port}", f"mirror.test:{metrics_port}"]
            session = client.create_session(network={"allow": allow})
            path = socket_path(running.daemon.config, session.id)
            for port in (grpc_port, metrics_port):
                for request in (
                    f"CONNECT mirror.test:{port} HTTP/1.1\r\n\r\n",
                    f"GET http://mirror.test:{port}/metrics HTTP/1.1\r\n\r\n",
                ):
                    answer = through_proxy(path, request.encode())
                    assert answer.startswith(b"HTTP/1.1 403 "), answer
                    assert b"toolrt's own port" in answer, answer
            client.close_session(session.id)
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
