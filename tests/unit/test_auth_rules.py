"""Tokens, the credential rules and principals, without a daemon."""

from __future__ import annotations

import json
import os
import stat

import pytest

from runtime.auth.credentials import Authenticator, Credentials, bearer_token, startup_problem
from runtime.auth.principals import CERTIFICATE, LOCAL, TOKEN, UNIX, Principal, certificate_tenant
from runtime.auth.tokens import (
    TOKEN_LENGTH,
    TokenStore,
    create_token,
    read_records,
    revoke_token,
)
from runtime.config import AuthConfig, Config
from runtime.errors import PermissionDenied, Unauthenticated
from tests.helpers import ManualClock as Clock


def test_tokens_file_keeps_hashes_and_is_private(tmp_path):
    path = tmp_path / "etc" / "tokens"
    record, token = create_token(path, "alice")
    _, admin_token = create_token(path, "ops", admin=True)
    text = path.read_text()
    assert token not in text and admin_token not in text
    assert len(token) == TOKEN_LENGTH and token.startswith(f"trt_{record.id}_")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = [json.loads(line) for line in text.splitlines() if not line.startswith("#")]
    assert [(r["tenant"], r["admin"]) for r in lines] == [("alice", False), ("ops", True)]
    assert set(lines[0]) == {"id", "tenant", "created", "sha256", "admin"}
    assert revoke_token(path, record.id) and not revoke_token(path, record.id)
    assert [r.tenant for r in read_records(path)] == ["ops"]
    with pytest.raises(ValueError, match="not a tenant name"):
        create_token(path, "../etc")


def test_store_sees_edits_within_its_interval_and_fails_closed(tmp_path, caplog):
    path = tmp_path / "tokens"
    clock = Clock()
    store = TokenStore(path, check_interval_s=1.0, clock=clock)
    assert len(store) == 0  # a missing file admits nobody
    record, token = create_token(path, "alice")
    assert store.lookup(token) is None  # not re-read yet
    clock.now = 1.0
    assert store.lookup(token) == record
    revoke_token(path, record.id)
    clock.now = 2.0
    assert store.lookup(token) is None  # replay of a revoked token
    # A line edited by hand into nonsense is logged and left out; the rest still work.
    _, other = create_token(path, "bob")
    with path.open("a") as f:
        f.write("{not json\n")
        f.write(json.dumps({"id": "a" * 12, "tenant": "Bad/Name", "sha256": "0" * 64}) + "\n")
    clock.now = 3.0
    assert store.lookup(other).tenant == "bob"
    assert "not a token record" in caplog.text and "not a tenant name" in caplog.text
    os.unlink(path)
    clock.now = 4.0
    assert store.lookup(other) is None


def test_lookup_refuses_near_misses(tmp_path):
    path = tmp_path / "tokens"
    record, token = create_token(path, "alice")
    store = TokenStore(path)
    flipped = token[:-1] + ("A" if token[-1] != "A" else "B")
    other_id = token.replace(record.id, "0" * 12) if record.id != "0" * 12 else token
    for bad in (flipped, other_id, token.upper(), token[:-1], "trt_" + "x" * 56):
        assert store.lookup(bad) is None, bad


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("Basic dXNlcjpwYXNz", "scheme 'Basic'"),
        ("Bearer", "scheme 'Bearer'"),
        ("Token trt_x", "scheme 'Token'"),
        ("Bearer  trt_" + "a" * 56, "spaces"),
        ("Bearer trt_" + "a" * 56 + " ", "spaces"),
        ("Bearer trt_" + "a" * 55 + "\t", "control"),
        ("Bearer trt_" + "é" * 56, "non-ASCII"),
        ("Bearer " + "x" * 100_000, "100000 characters"),
        ("Bearer abc", "3 characters"),
    ],
)
def test_malformed_authorization_says_what_is_wrong(value, says):
    with pytest.raises(Unauthenticated, match=says) as info:
        bearer_token([value])
    assert info.value.reason == "malformed"


def test_a_bare_token_is_not_echoed():
    token = "trt_0123456789ab_" + "s" * 43
    with pytest.raises(Unauthenticated) as info:
        bearer_token([token])
    assert "0123456789ab" not in str(info.value) and "sss" not in str(info.value)


def test_bearer_scheme_is_case_insensitive_and_single():
    token = "trt_" + "a" * 56
    assert bearer_token([f"bearer {token}"]) == token
    with pytest.raises(Unauthenticated, match="2 authorization values"):
        bearer_token([f"Bearer {token}", f"Bearer {token}"])


def test_credential_rules_in_order(tmp_path):
    path = tmp_path / "tokens"
    _, alice = create_token(path, "alice")
    _, ops = create_token(path, "ops", admin=True)
    auth = Authenticator(AuthConfig(tokens_file=str(path), unix_tenant="team"))
    tcp = "ipv4:127.0.0.1:4000"
    assert auth.authenticate(Credentials([f"Bearer {alice}"], tcp)).tenant == "alice"
    admin = auth.authenticate(Credentials([f"Bearer {ops}"], tcp))
    assert (admin.kind, admin.admin, admin.runs_tools) == (TOKEN, True, False)
    # Auth is on: a loopback caller without credentials is refused, saying what to send.
    with pytest.raises(Unauthenticated, match="no credentials.*Bearer") as info:
        auth.authenticate(Credentials([], tcp))
    assert info.value.reason == "missing"
    # A wrong token never says which tokens exist.
    with pytest.raises(Unauthenticated, match="not valid: unknown, revoked or mistyped"):
        auth.authenticate(Credentials([f"Bearer {alice[:-2]}xy"], "unix:"))
    unix = auth.authenticate(Credentials([], "unix:"))
    assert (unix.tenant, unix.kind, unix.admin) == ("team", UNIX, False)
    cert = auth.authenticate(
        Credentials([], tcp, "CN=bob", "bob", ["toolrt://tenant/carol", "spiffe://x"])
    )
    assert (cert.tenant, cert.name, cert.kind) == ("carol", "CN=bob", CERTIFICATE)
    # A token wins over the certificate of the connection.
    both = Credentials([f"Bearer {alice}"], tcp, "CN=bob", "bob")
    assert auth.authenticate(both).tenant == "alice"


def test_without_auth_only_local_callers_are_served():
    auth = Authenticator(AuthConfig())
    local = auth.authenticate(Credentials([], "ipv6:[::1]:5000"))
    assert (local.tenant, local.kind, local.admin, local.runs_tools) == (
        "default",
        LOCAL,
        True,
        True,
    )
    assert auth.authenticate(Credentials([], "unix:/run/t.sock")).admin
    with pytest.raises(Unauthenticated, match="no credentials"):
        auth.authenticate(Credentials([], "ipv4:10.1.2.3:5000"))
    with pytest.raises(Unauthenticated, match="takes no tokens"):
        auth.authenticate(Credentials(["Bearer trt_" + "a" * 56], "ipv4:127.0.0.1:1"))


@pytest.mark.parametrize(
    ("uris", "cn", "says"),
    [
        (["toolrt://tenant/../etc"], "", "not a tenant name"),
        (["toolrt://tenant/a/b"], "", "not a tenant name"),
        (["toolrt://tenant/"], "ok", "not a tenant name"),
        ([], "Alice Smith", "not a tenant name"),
        ([], "a\nb", "not a tenant name"),
        ([], "x" * 64, "not a tenant name"),
        ([], "", "names no tenant"),
        (["toolrt://tenant/a", "toolrt://tenant/b"], "", "several tenants"),
    ],
)
def test_certificate_names_that_are_refused(uris, cn, says):
    with pytest.raises(Unauthenticated, match=says):
        certificate_tenant(uris, cn)


def test_certificate_tenant_from_uri_else_cn():
    assert certificate_tenant(["toolrt://tenant/alice"], "ignored") == "alice"
    assert certificate_tenant(["https://example.com"], "bob.ci") == "bob.ci"


def test_what_principals_may_call():
    service = "toolruntime.v1.ToolRuntime"
    admin = Principal("ops", "abc", TOKEN, admin=True)
    with pytest.raises(PermissionDenied, match="admin token abc cannot use sessions"):
        admin.authorize(service, "Execute")
    admin.authorize(service, "ListTools")
    admin.authorize(service, "AdminStats")
    admin.authorize("grpc.reflection.v1alpha.ServerReflection", "ServerReflectionInfo")
    tenant = Principal("alice", "def", TOKEN)
    tenant.authorize(service, "CreateSession")
    with pytest.raises(PermissionDenied, match="needs an admin principal"):
        tenant.authorize(service, "AdminStats")


@pytest.mark.parametrize(
    ("listen", "auth", "says"),
    [
        ("0.0.0.0:50051", {}, "auth.tokens_file"),
        ("[::]:50051", {}, "not a loopback address"),
        (":50051", {}, "not a loopback address"),
        ("example.com:1", {}, "not a loopback address"),
        ("127.0.0.1:1", {"tls_cert_file": "c"}, "tls_key_file"),
        ("127.0.0.1:1", {"tls_client_ca_file": "ca"}, "needs TLS"),
    ],
)
def test_startup_refusals_name_the_setting(listen, auth, says):
    assert says in startup_problem(Config(listen=listen, auth=auth))


@pytest.mark.parametrize(
    ("listen", "auth"),
    [
        ("127.0.0.1:50051", {}),
        ("[::1]:50051", {}),
        ("localhost:50051", {}),
        ("", {}),
        ("0.0.0.0:50051", {"tokens_file": "/t"}),
        ("0.0.0.0:50051", {"tls_cert_file": "c", "tls_key_file": "k", "tls_client_ca_file": "a"}),
    ],
)
def test_startup_allowed(listen, auth):
    assert startup_problem(Config(listen=listen, auth=auth)) == ""
