"""Network egress through gRPC without an engine (fake backend): the policy's
checks and echo, the proxy variables commands get, the relay started, the
session's catalog, and the proxy gone with the session. Traffic through a
real sandbox is tests/docker/test_egress.py."""

from __future__ import annotations

import os
import shutil
import tempfile

import grpc
import pytest

from runtime.agent import protocol
from runtime.client import Client, ToolrtRpcError
from runtime.sandbox.relay_dirs import socket_path


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
