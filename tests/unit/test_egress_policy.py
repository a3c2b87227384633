"""Egress pure logic: host patterns and ceilings, IP literals in every spelling,
the address ranges never dialled, the proxy's request parsing, the ClientHello's SNI."""

from __future__ import annotations

import ipaddress
import ssl

import pytest

from runtime.config import load_config
from runtime.egress.http import (
    HELLO,
    MALFORMED,
    NEED_MORE,
    NOT_TLS,
    ProxyRequestError,
    answer,
    client_hello_sni,
    parse_request,
    upstream_head,
)
from runtime.egress.proxy import denial_text
from runtime.egress.service import Egress, NetworkRequest, ceilings_for, proxy_env
from runtime.errors import BadRequest, PermissionDenied
from runtime.policy.addresses import blocked_reason, ip_literal, loose_ipv4, normalize_host
from runtime.policy.hosts import (
    Ceiling,
    NetworkPolicy,
    PatternError,
    clamp_cap,
    outside,
    parse_pattern,
    parse_patterns,
)


# -- patterns ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("pypi.org", "pypi.org"),
        ("PyPI.org.", "pypi.org"),
        ("*.pythonhosted.org", "*.pythonhosted.org"),
        ("github.com:443", "github.com:443"),
        ("mirror.test:*", "mirror.test:*"),
        ("*", "*"),
        ("*:8080", "*:8080"),
        ("_dmarc.example.com", "_dmarc.example.com"),
    ],
)
def test_patterns_parse_and_print_normalized(text, shown):
    assert str(parse_pattern(text)) == shown


@pytest.mark.parametrize(
    "text",
    [
        "",
        "https://pypi.org",
        "pypi.org/simple",
        "user@pypi.org",
        "127.0.0.1",
        "2130706433",
        "[::1]",
        "::1",
        "pypi.org:0",
        "pypi.org:65536",
        "pypi.org:http",
        "*.",
        "a..b",
        "-bad.example",
        "bücher.example",
        "example.123",
        "foo*.example.com",
    ],
)
def test_malformed_patterns_say_what_is_expected(text):
    with pytest.raises(PatternError, match="expected|IP address"):
        parse_pattern(text)


def test_a_list_names_the_bad_entry():
    with pytest.raises(PatternError, match=r"network.allow\[1\]"):
        parse_patterns(["pypi.org", "http://x"], "network.allow")


@pytest.mark.parametrize(
    ("pattern", "host", "port", "expected"),
    [
        ("pypi.org", "pypi.org", 443, True),
        ("pypi.org", "pypi.org", 80, True),
        ("pypi.org", "pypi.org", 8080, False),
        ("pypi.org", "www.pypi.org", 443, False),
        ("*.pythonhosted.org", "files.pythonhosted.org", 443, True),
        ("*.pythonhosted.org", "a.b.pythonhosted.org", 443, True),
        ("*.pythonhosted.org", "pythonhosted.org", 443, False),
        ("*.pythonhosted.org", "evilpythonhosted.org", 443, False),
        ("github.com:443", "github.com", 80, False),
        ("github.com:443", "github.com", 443, True),
        ("mirror.test:*", "mirror.test", 3141, True),
        ("*", "anything.example", 443, True),
        ("*", "anything.example", 22, False),
    ],
)
def test_pattern_matching(pattern, host, port, expected):
    assert parse_pattern(pattern).matches(host, port) is expected


@pytest.mark.parametrize(
    ("ceiling", "pattern", "expected"),
    [
        ("pypi.org", "pypi.org", True),
        ("pypi.org", "pypi.org:443", True),
        ("pypi.org", "pypi.org:8080", False),
        ("pypi.org", "pypi.org:*", False),
        ("pypi.org:*", "pypi.org:8080", True),
        ("*.org", "pypi.org", True),
        ("*.org", "*.pythonhosted.org", True),
        ("*.pythonhosted.org", "*.pythonhosted.org", True),
        ("*.pythonhosted.org", "pythonhosted.org", False),
        ("*.pythonhosted.org", "*.org", False),
        ("pypi.org", "*.pypi.org", False),
        ("*", "*.org", True),
        ("*", "*:*", False),
        ("*:*", "*:22", True),
        ("*.org", "*", False),
    ],
)
def test_a_ceiling_covers_only_what_it_admits(ceiling, pattern, expected):
    assert parse_pattern(ceiling).covers(parse_pattern(pattern)) is expected


def test_outside_names_the_pattern_and_the_ceiling():
    ceilings = [Ceiling("network.allow_max", parse_patterns(["*.test"], "c"))]
    assert outside(parse_patterns(["a.test", "*.b.test"], "p"), ceilings) == ""
    problem = outside(parse_patterns(["a.test", "pypi.org:443"], "p"), ceilings)
    assert problem == (
        "network pattern 'pypi.org:443' is outside what network.allow_max allows (*.test)"
    )
    empty = [Ceiling("network.allow_max", ())]
    assert "allows (nothing)" in outside(parse_patterns(["a.test"], "p"), empty)


def test_caps_are_clamped_to_the_maximum():
    assert clamp_cap(0, 100) == 100
    assert clamp_cap(10, 100) == 10
    assert clamp_cap(1000, 100) == 100


# -- the session policy --------------------------------------------------------
def test_a_session_policy_within_the_config_ceiling():
    config = load_config(
        None, {"network": {"allow_max": ["*.test:*"], "max_bytes": 1000}}, environ={}
    )
    egress = Egress(config)
    assert egress.policy_for("default", None) == NetworkPolicy()
    assert not egress.policy_for("default", NetworkRequest(allow=[])).enabled
    policy = egress.policy_for("default", NetworkRequest(["A.test", "a.test:80"], max_bytes=10))
    assert policy.allow_texts() == ["a.test", "a.test:80"]
    assert (policy.max_bytes, policy.max_connections) == (10, 64)
    assert policy.admits("a.test", 443) and not policy.admits("b.test", 443)
    with pytest.raises(PermissionDenied, match="'pypi.org'"):
        egress.policy_for("default", NetworkRequest(["pypi.org"]))
    with pytest.raises(BadRequest, match=r"network.allow\[0\]"):
        egress.policy_for("default", NetworkRequest(["http://a.test/"]))


def test_a_tenants_network_allow_max_is_a_second_ceiling():
    config = load_config(
        None,
        {
            "network": {"allow_max": ["pypi.org", "*.pythonhosted.org"]},
            "tenants": {"alice": {"network_allow_max": ["pypi.org"]}},
        },
        environ={},
    )
    [only] = ceilings_for(config, "bob")  # no table for bob, none for default
    assert only.name == "network.allow_max"
    egress = Egress(config)
    assert egress.policy_for("bob", NetworkRequest(["files.pythonhosted.org"])).enabled
    assert egress.policy_for("alice", NetworkRequest(["pypi.org"])).enabled
    with pytest.raises(PermissionDenied, match="alice's network_allow_max"):
        egress.policy_for("alice", NetworkRequest(["files.pythonhosted.org"]))


def test_config_checks_patterns_and_pins():
    config = load_config(
        None,
        {"network": {"allow_max": ["PyPI.org"], "hosts": {"Mirror.Test.": "10.0.0.5"}}},
        environ={},
    )
    assert config.network.allow_max == ["pypi.org"]
    assert config.network.hosts == {"mirror.test": "10.0.0.5"}
    env = load_config(None, environ={"TOOLRT_NETWORK__ALLOW_MAX": "a.test, *.b.test"})
    assert env.network.allow_max == ["a.test", "*.b.test"]
    with pytest.raises(ValueError, match="allow_max"):
        load_config(None, {"network": {"allow_max": ["https://x"]}}, environ={})
    with pytest.raises(ValueError, match="expected an IP address"):
        load_config(None, {"network": {"hosts": {"mirror.test": "mirror.internal"}}}, environ={})
    with pytest.raises(ValueError, match="not a host name"):
        load_config(None, {"network": {"hosts": {"bad name": "10.0.0.5"}}}, environ={})


PINNED = {"mirror.test": "127.0.0.1", "six.test": "::1", "lan.test": "10.0.0.5"}


@pytest.mark.parametrize(
    ("network", "tenant_allow", "says"),
    [
        ({"allow_max": ["mirror.test:*"]}, None, "network.allow_max[0] 'mirror.test:*'"),
        ({"allow_max": ["a.test", "*.test:*"]}, None, "network.allow_max[1] '*.test:*'"),
        ({"allow_max": ["*:*"]}, None, "'*:*' reaches every port of mirror.test"),
        ({"allow_max": ["six.test:*"]}, None, "six.test, which network.hosts pins to ::1"),
        ({"allow_max": ["mirror.test:80"]}, ["*.test:*"], "tenants.alice.network_allow_max[0]"),
    ],
)
def test_a_wildcard_port_over_a_name_pinned_to_loopback_stops_the_start(
    network, tenant_allow, says
):
    # Every port of 127.0.0.1 is also toolrt's own: gRPC, metrics.
    values = {"network": {**network, "hosts": PINNED}}
    if tenant_allow is not None:
        values["tenants"] = {"alice": {"network_allow_max": tenant_allow}}
    with pytest.raises(ValueError, match="where toolrt itself listens") as refused:
        load_config(None, values, environ={})
    assert says in str(refused.value)


def test_named_ports_and_other_pins_start():
    allow = ["mirror.test:3141", "mirror.test", "lan.test:*", "*.other:*"]
    config = load_config(None, {"network": {"allow_max": allow, "hosts": PINNED}}, environ={})
    assert config.network.allow_max == allow


def test_a_sessions_wildcard_port_over_a_loopback_pin_is_refused():
    # A config built in code skips the start's check: CreateSession checks again.
    config = load_config(None, {"network": {"allow_max": ["*.test:*"]}}, environ={})
    config.network.hosts["mirror.test"] = "127.0.0.1"
    egress = Egress(config)
    assert egress.policy_for("default", NetworkRequest(["mirror.test:3141"])).enabled
    with pytest.raises(PermissionDenied, match="network.allow\\[0\\] 'mirror.test:\\*'"):
        egress.policy_for("default", NetworkRequest(["mirror.test:*"]))


def test_a_socket_root_too_long_for_unix_sockets_is_refused():
    long = "/tmp/" + "d" * 80
    config = load_config(
        None, {"network": {"allow_max": ["a.test"], "socket_dir": long}}, environ={}
    )
    with pytest.raises(ValueError, match="108|107|shorter network.socket_dir"):
        Egress(config)


def test_proxy_variables_in_both_cases():
    env = proxy_env()
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1"
    assert len(env) == 6


# -- addresses -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("10.1.65535", "10.1.255.255"),
        ("127.0.0.1.", "127.0.0.1"),
        ("::1", "::1"),
        ("[::1]", "::1"),
        ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),
        ("fe80::1%25eth0", "fe80::1"),
    ],
)
def test_every_spelling_of_an_address_is_an_ip_literal(text, address):
    found = ip_literal(text)
    assert found is not None
    assert str(found).split("%")[0] == address


@pytest.mark.parametrize("text", ["pypi.org", "256.1.1.1", "1.2.3.4.5", "0x1g", "a.1", "", "08"])
def test_names_and_impossible_numbers_are_not_literals(text):
    assert ip_literal(text) is None


def test_loose_ipv4_bounds():
    assert loose_ipv4("4294967295") == ipaddress.IPv4Address("255.255.255.255")
    assert loose_ipv4("4294967296") is None
    assert loose_ipv4("1.16777216") is None


@pytest.mark.parametrize(
    "name", ["127.0.0.1", "2130706433", "a.123", "a.0x10", "x y", "ünï.test", "a" * 254, ""]
)
def test_host_names_refuse_numbers_and_non_ascii(name):
    with pytest.raises(ValueError, match="."):
        normalize_host(name)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("10.2.3.4", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("100.64.0.1", "shared (CGNAT)"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("240.0.0.1", "private"),
        ("255.255.255.255", "private"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("fd12::1", "private"),
        ("ff02::1", "multicast"),
        ("fec0::1", "site-local"),
        ("::ffff:127.0.0.1", "loopback (IPv4 inside IPv6)"),
        ("::ffff:10.0.0.1", "private (IPv4 inside IPv6)"),
        ("::127.0.0.1", "loopback (IPv4 inside IPv6)"),
        ("64:ff9b::a9fe:a9fe", "link-local (IPv4 inside IPv6)"),
        ("2002:7f00:1::", "loopback (IPv4 inside IPv6)"),
        ("2001:db8::1", "private"),
    ],
)
def test_non_global_addresses_are_blocked_with_a_reason(address, reason):
    assert blocked_reason(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize(
    "address", ["151.101.0.223", "8.8.8.8", "2a04:4e42::223", "::ffff:8.8.8.8", "64:ff9b::808:808"]
)
def test_global_addresses_are_dialled(address):
    assert blocked_reason(ipaddress.ip_address(address)) == ""


# -- requests ------------------------------------------------------------------
def test_connect_and_absolute_requests_parse():
    connect = parse_request(b"CONNECT Files.PythonHosted.org:443 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (connect.connect, connect.host, connect.port, connect.target) == (
        True,
        "files.pythonhosted.org",
        443,
        "",
    )
    six = parse_request(b"CONNECT [::1]:8080 HTTP/1.1\r\n\r\n")
    assert (six.host, six.port) == ("::1", 8080)
    get = parse_request(
        b"GET http://pypi.test:8080/simple/x/?a=1#frag HTTP/1.1\r\nHost: pypi.test:8080\r\n"
        b"Proxy-Connection: keep-alive\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n"
        b"Accept: */*\r\n\r\n"
    )
    assert (get.host, get.port, get.target) == ("pypi.test", 8080, "/simple/x/?a=1")
    assert upstream_head(get) == (
        b"GET /simple/x/?a=1 HTTP/1.1\r\nHost: pypi.test:8080\r\nAccept: */*\r\n"
        b"Connection: close\r\n\r\n"
    )
    bare = parse_request(b"GET http://web.test HTTP/1.0\r\n\r\n")
    assert upstream_head(bare) == b"GET / HTTP/1.0\r\nHost: web.test\r\nConnection: close\r\n\r\n"
    posted = parse_request(b"POST http://a.test/ HTTP/1.1\r\nContent-Length: 12\r\n\r\n")
    assert (posted.content_length, posted.chunked) == (12, False)
    chunked = parse_request(b"POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert chunked.chunked


@pytest.mark.parametrize(
    ("head", "status", "says"),
    [
        (b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", 400, "absolute http:// URL"),
        (b"GET https://a.test/ HTTP/1.1\r\n\r\n", 400, "CONNECT"),
        (b"GET ftp://a.test/ HTTP/1.1\r\n\r\n", 400, "absolute http:// URL"),
        (b"CONNECT a.test HTTP/1.1\r\n\r\n", 400, "needs a port"),
        (b"CONNECT a.test:99999 HTTP/1.1\r\n\r\n", 400, "host[:port]"),
        (b"GET http://user@a.test/ HTTP/1.1\r\n\r\n", 400, "host[:port]"),
        (b"GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n", 400, "Host header"),
        (b"GET http://a.test/ HTTP/1.1\r\nHost: a.test:81\r\n\r\n", 400, "Host header"),
        (b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nHost: a.test\r\n\r\n", 400, "one Host"),
        (b"GET http://a.test/ HTTP/2\r\n\r\n", 400, "HTTP/1.x"),
        (b"GET http://a.test/ HTTP/1.1 x\r\n\r\n", 400, "request line"),
        (b"GET http://a.test/ HTTP/1.1\r\nX: 1\r\n folded\r\n\r\n", 400, "folded"),
        (b"GET http://a.test/ HTTP/1.1\r\nBad Header: 1\r\n\r\n", 400, "header line"),
        (
            b"POST http://a.test/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            400,
            "one number",
        ),
        (
            b"POST http://a.test/ HTTP/1.1\r\nContent-Length: 1\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n",
            400,
            "not both",
        ),
        (b"POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "chunked"),
    ],
)
def test_ambiguous_or_foreign_requests_are_refused(head, status, says):
    with pytest.raises(ProxyRequestError) as refused:
        parse_request(head)
    assert refused.value.status == status
    assert says in refused.value.text


def test_refusals_carry_the_text_in_the_reason_and_the_body():
    text = denial_text("evil.test")
    assert text == "toolrt: evil.test is not in this session's network allowlist"
    response = answer(403, text)
    head, body = response.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 403 toolrt: evil.test is not in this session")
    assert body == text.encode() + b"\n"
    assert f"Content-Length: {len(body)}".encode() in head


# -- TLS -------------------------------------------------------------------------
def client_hello(server_name: str | None) -> bytes:
    """A real ClientHello from Python's ssl module, as a client sends it."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    context = ssl.create_default_context()
    context.check_hostname = server_name is not None
    if server_name is None:
        context.verify_mode = ssl.CERT_NONE
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_the_server_name_of_a_client_hello():
    hello = client_hello("Files.PythonHosted.org")
    assert client_hello_sni(hello) == (HELLO, "files.pythonhosted.org")
    assert client_hello_sni(client_hello(None)) == (HELLO, None)
    for cut in (1, 4, 5, 20, len(hello) - 1):
        assert client_hello_sni(hello[:cut])[0] == NEED_MORE


def test_a_client_hello_split_across_records_is_read_whole():
    hello = client_hello("secure.test")
    payload = hello[5:]
    records = b"".join(
        b"\x16\x03\x01" + len(part).to_bytes(2, "big") + part
        for part in (payload[:7], payload[7:300], payload[300:])
    )
    assert client_hello_sni(records) == (HELLO, "secure.test")


def test_other_protocols_and_broken_hellos():
    assert client_hello_sni(b"GET / HTTP/1.1\r\n")[0] == NOT_TLS
    assert client_hello_sni(b"SSH-2.0-OpenSSH_9\r\n")[0] == NOT_TLS
    assert client_hello_sni(b"\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00")[0] == MALFORMED
    assert client_hello_sni(b"\x16\x02\x01\x00\x05abcde")[0] == MALFORMED
    hello = client_hello("a.test")
    assert client_hello_sni(hello + b"\x17\x03\x03\x00\x01x")[0] == HELLO
    garbage = b"\x16\x03\x01\x40\x00" + b"\x01\xff\xff\xff" + b"\x00" * (0x4000 - 4)
    assert client_hello_sni(garbage * 5)[0] == MALFORMED
