"""Authentication through the real gRPC server over real TLS: tokens, client
certificates, the unix socket, health and reflection, start-up refusals."""

from __future__ import annotations

import asyncio
import grp
import os
import stat
import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from runtime.auth.tokens import create_token, revoke_token
from runtime.client import TLS, Client
from runtime.config import Config
from runtime.core import build_core
from runtime.errors import ConfigurationError
from runtime.sandbox.fake import FakeBackend
from runtime.server.app import Daemon
from tests.conftest import config_for_test
from tests.pki import CA
from tests.unit.secured import status_of

UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED


def wait_until(check, limit: float = 5.0) -> float:
    """Seconds until `check()` held; fails past `limit` (DESIGN: edits count within 5 s)."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < limit, "not within the limit"
        time.sleep(0.1)
    return time.monotonic() - started


def test_tokens_name_the_tenant(secured):
    alice = secured.client("alice")
    session = alice.create_session()
    assert session.tenant == "alice"
    assert [s.tenant for s in alice.list_sessions()] == ["alice"]
    assert alice.call(session.id, "shell", {"command": "true"}).ok


@pytest.mark.parametrize(
    ("metadata", "says"),
    [
        ((), "no credentials: send metadata 'authorization: Bearer <token>'"),
        ((("authorization", "Basic YWxpY2U6cHc="),), "scheme 'Basic'"),
        ((("authorization", "Bearer  {alice}"),), "spaces in or around it"),
        ((("authorization", "Bearer {alice} "),), "spaces in or around it"),
        ((("authorization", "Bearer " + "t" * 4000),), "4000 characters"),
        ((("authorization", "Bearer {alice}x"),), "61 characters"),
        (
            (("authorization", "Bearer {alice}"), ("authorization", "Bearer {bob}")),
            "2 authorization",
        ),
        ((("authorization", "Bearer trt_000000000000_" + "A" * 43),), "not valid"),
    ],
)
def test_bad_credentials_say_which_and_never_which_tokens_exist(secured, metadata, says):
    client = secured.client()
    sent = tuple((k, v.format(**secured.tokens)) for k, v in metadata)
    client.metadata = sent
    code, details = status_of(client.list_sessions)
    assert code == UNAUTHENTICATED and says in details, details
    for token in secured.tokens.values():
        assert token not in details and token[4:16] not in details


def test_a_non_ascii_token_never_leaves_the_client(secured):
    client = secured.client(token="trt_" + "é" * 56)
    # grpcio refuses to send metadata that is not printable ASCII; the server's
    # own check of such a value is in test_auth_rules.
    with pytest.raises(Exception, match="execute_batch|Illegal header value|metadata"):
        client.list_sessions()


def test_health_is_open_and_reflection_needs_credentials(secured):
    anonymous = secured.client()
    reply = health_pb2_grpc.HealthStub(anonymous.channel).Check(health_pb2.HealthCheckRequest())
    assert reply.status == health_pb2.HealthCheckResponse.SERVING

    def services(client: Client) -> list[str]:
        stub = reflection_pb2_grpc.ServerReflectionStub(client.channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        replies = stub.ServerReflectionInfo(iter([request]), metadata=client.metadata)
        return [s.name for r in replies for s in r.list_services_response.service]

    code, _ = status_of(lambda: services(anonymous))
    assert code == UNAUTHENTICATED
    assert "toolruntime.v1.ToolRuntime" in services(secured.client("alice"))
    assert "toolruntime.v1.ToolRuntime" in services(secured.client("ops"))  # admin too


def test_plaintext_clients_cannot_talk_to_a_tls_daemon(secured):
    with Client(secured.daemon.target, token=secured.tokens["alice"], timeout=5) as plain:
        code, _ = status_of(plain.list_sessions)
    assert code == grpc.StatusCode.UNAVAILABLE


def test_admin_tokens_administer_but_run_no_tools(secured):
    ops = secured.client("ops")
    assert ops.list_tools()
    code, details = status_of(ops.create_session)
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert f"admin token {secured.ids['ops']} cannot use sessions" in details
    code, _ = status_of(lambda: ops.call("0" * 32, "shell", {"command": "true"}))
    assert code == grpc.StatusCode.PERMISSION_DENIED


def test_tokens_file_edits_take_effect_while_running(secured):
    alice = secured.client("alice")
    session = alice.create_session()
    # A new token works without a restart.
    _, carol_token = create_token(secured.tokens_file, "carol")
    carol = secured.client(token=carol_token)
    assert wait_until(lambda: status_of(carol.list_sessions) is None) < 5
    # Revoked: the same token replayed is refused, as is every RPC with it.
    assert revoke_token(secured.tokens_file, secured.ids["alice"])
    wait_until(lambda: status_of(alice.list_sessions) is not None)
    code, details = status_of(lambda: alice.call(session.id, "shell", {"command": "true"}))
    assert code == UNAUTHENTICATED and "not valid" in details
    # An edit by hand, in place: bob's line removed.
    text = secured.tokens_file.read_text()
    kept = [line for line in text.splitlines() if secured.ids["bob"] not in line]
    with secured.tokens_file.open("r+") as f:
        f.truncate(0)
        f.write("\n".join(kept) + "\n")
    bob = secured.client("bob")
    wait_until(lambda: status_of(bob.list_sessions) is not None)
    assert status_of(carol.list_sessions) is None


def test_mutual_tls_names_tenants_from_certificates(secure_daemon, pki, tmp_path):
    secured = secure_daemon(auth={"tls_client_ca_file": pki.cert_file})
    carol = pki.client("carol", "Carol Smith", "toolrt://tenant/carol")
    client = secured.client(cert_file=carol.cert_file, key_file=carol.key_file)
    session = client.create_session()
    assert session.tenant == "carol"
    dave = pki.client("dave", "dave")  # no toolrt URI: the CN
    assert (
        secured.client(cert_file=dave.cert_file, key_file=dave.key_file).create_session().tenant
        == "dave"
    )
    # A token on a certified connection names the principal instead.
    with_token = secured.client("alice", cert_file=carol.cert_file, key_file=carol.key_file)
    assert with_token.create_session().tenant == "alice"
    records = [r for r in secured.audit() if r["event"] == "session.create"]
    assert [r["principal"] for r in records] == ["CN=Carol Smith", "CN=dave", secured.ids["alice"]]


@pytest.mark.parametrize(
    ("common_name", "uri"),
    [
        ("ok", "toolrt://tenant/../etc"),
        ("ok", "toolrt://tenant/a/b"),
        ("ok", "toolrt://tenant/Alice"),
        ("alice,toolrt.tenant=x", ""),
        ("a b", ""),
        ("x" * 64, ""),
    ],
)
def test_certificates_naming_bad_tenants_are_refused(secure_daemon, pki, common_name, uri):
    secured = secure_daemon(auth={"tls_client_ca_file": pki.cert_file})
    issued = pki.client("bad", common_name, uri)
    client = secured.client(cert_file=issued.cert_file, key_file=issued.key_file)
    code, details = status_of(client.list_sessions)
    assert code == UNAUTHENTICATED and "not a tenant name" in details, details


def test_certificates_from_elsewhere_or_none_never_connect(secure_daemon, pki, tmp_path):
    secured = secure_daemon(auth={"tls_client_ca_file": pki.cert_file})
    other = CA(tmp_path, "other CA").client("eve", "eve", "toolrt://tenant/alice")
    for tls in ({"cert_file": other.cert_file, "key_file": other.key_file}, {}):
        client = Client(
            secured.daemon.target,
            token=secured.tokens["alice"],
            tls=TLS(ca_file=pki.cert_file, **tls),
            timeout=5,
        )
        with client:
            code, _ = status_of(client.list_sessions)
        assert code == grpc.StatusCode.UNAVAILABLE


def test_unix_socket_mode_group_and_tenant(make_daemon, tmp_path):
    # The fake backend: this is about who may connect, not about sandboxes.
    tokens_file = tmp_path / "tokens"
    _, alice = create_token(tokens_file, "alice")
    group = next(g for g in grp.getgrall() if g.gr_gid != os.getgid())
    path = tmp_path / "toolrt.sock"
    make_daemon(
        backend="fake",
        listen="",
        unix_socket=str(path),
        unix_socket_mode="0660",
        unix_socket_group=group.gr_name,
        auth={"tokens_file": str(tokens_file), "unix_tenant": "team"},
    )
    st = path.stat()
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660
    assert st.st_gid == group.gr_gid
    with Client(f"unix:{path}", token="") as local, Client(f"unix:{path}", token=alice) as tok:
        assert local.create_session().tenant == "team"
        assert tok.create_session().tenant == "alice"
        assert [s.tenant for s in local.list_sessions()] == ["team"]
        with Client(f"unix:{path}", token=alice[:-1] + "!") as bad:
            code, _ = status_of(bad.list_sessions)
        assert code == UNAUTHENTICATED


def daemon_of(config: Config) -> None:
    async def build() -> None:
        Daemon(build_core(config, backend=FakeBackend()))

    asyncio.run(build())


def test_without_auth_only_loopback_may_listen(tmp_path):
    config = config_for_test(listen="0.0.0.0:0")
    with pytest.raises(ConfigurationError, match="not a loopback address.*auth.tokens_file"):
        daemon_of(config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRT_")}
    serve = [sys.executable, "-m", "runtime", "serve", "--listen", "0.0.0.0:50999"]
    done = subprocess.run(serve, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 2
    assert "refusing to start" in done.stderr and "auth.tls_client_ca_file" in done.stderr
    half = config_for_test(auth={"tls_cert_file": str(tmp_path / "c.pem")})
    with pytest.raises(ConfigurationError, match="tls_key_file"):
        daemon_of(half)
    missing = config_for_test(
        auth={"tls_cert_file": str(tmp_path / "c.pem"), "tls_key_file": str(tmp_path / "k")}
    )
    with pytest.raises(ConfigurationError, match="auth.tls_key_file = .* cannot be read"):
        daemon_of(missing)


def test_tokens_and_logs_never_show_a_token(secured, caplog):
    secured.client("alice").create_session()
    client = secured.client(token=secured.tokens["bob"][:-1] + "x")
    for _ in range(20):
        status_of(client.list_sessions)
    secured.flush_denials()
    text = caplog.text + secured.audit_file.read_text() + secured.tokens_file.read_text()
    for token in secured.tokens.values():
        assert token not in text and token[16:] not in text
    assert caplog.text.count("refused authentication from 127.0.0.1") == 1
