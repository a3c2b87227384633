"""The proxy's HTTP: a request's head, the head sent upstream, the proxy's own
answers, and the server name in a TLS ClientHello.

Strict on purpose: a request the proxy could read one way and an upstream
another (two Content-Lengths, a Host header naming another site, folded
headers, credentials in the authority) is refused rather than repaired.

Pure logic, unit-tested in tests/unit/test_egress_policy.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A request head larger than this is refused (431).
MAX_HEAD = 64 * 1024
# A ClientHello (post-quantum key shares make them > 1 KiB) is read whole,
# across TLS records, up to this size.
MAX_CLIENT_HELLO = 64 * 1024
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_PORT = re.compile(r"^[0-9]{1,5}$")
# Headers meant for the proxy or for one hop, never passed upstream.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "upgrade",
    }
)
REASONS = {
    200: "Connection established",
    400: "Bad Request",
    403: "Forbidden",
    405: "Method Not Allowed",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
    502: "Bad Gateway",
    504: "Gateway Timeout",
}


class ProxyRequestError(ValueError):
    """A request the proxy will not serve: its status and the text for the client."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


@dataclass(frozen=True)
class ProxyRequest:
    """One client request to the proxy, checked for consistency."""

    method: str
    # As the client wrote it (lower-cased, IPv6 brackets removed).
    host: str
    port: int
    # Origin-form ("/path?query") of a plain HTTP request; "" for CONNECT.
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]
    # The request body's framing (plain HTTP only).
    content_length: int = 0
    chunked: bool = False

    @property
    def connect(self) -> bool:
        return self.method == "CONNECT"

    def header(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name]


def _authority(text: str, default_port: int | None) -> tuple[str, int]:
    """(host, port) of `host[:port]` / `[v6][:port]`; ProxyRequestError if malformed."""
    bad = ProxyRequestError(400, f"toolrt: {text[:200]!r} is not a host[:port]")
    if not text or "@" in text or any(c.isspace() or ord(c) < 33 or ord(c) > 126 for c in text):
        raise bad
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise bad
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise bad
        port_text = rest[1:] if rest else ""
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            host, port_text = text, ""
    if not host:
        raise bad
    if not port_text:
        if default_port is None:
            raise ProxyRequestError(400, f"toolrt: {text[:200]!r} needs a port (host:port)")
        return host.lower(), default_port
    if not _PORT.match(port_text) or not 1 <= int(port_text) <= 65535:
        raise bad
    return host.lower(), int(port_text)


def _request_line(line: str) -> tuple[str, str, str]:
    parts = line.split(" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]):
        raise ProxyRequestError(400, "toolrt: a request line is METHOD TARGET HTTP/1.x")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise ProxyRequestError(400, f"toolrt: {version[:20]!r}: this proxy speaks HTTP/1.x")
    return method, target, version


def _headers(lines: list[str]) -> tuple[tuple[str, str], ...]:
    headers = []
    for line in lines:
        if line[:1] in (" ", "\t"):
            raise ProxyRequestError(400, "toolrt: folded header lines are not accepted")
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.match(name):
            raise ProxyRequestError(400, f"toolrt: {line[:100]!r} is not a header line")
        headers.append((name, value.strip(" \t")))
    return tuple(headers)


def _framing(headers: tuple[tuple[str, str], ...]) -> tuple[int, bool]:
    lengths = {v for k, v in headers if k.lower() == "content-length"}
    codings = [v for k, v in headers if k.lower() == "transfer-encoding"]
    if codings:
        if lengths:
            text = "toolrt: a request has Content-Length or Transfer-Encoding, not both"
            raise ProxyRequestError(400, text)
        if [c.strip().lower() for c in codings] != ["chunked"]:
            raise ProxyRequestError(501, "toolrt: the only request transfer coding is chunked")
        return 0, True
    if not lengths:
        return 0, False
    if len(lengths) > 1 or not next(iter(lengths)).isdigit():
        raise ProxyRequestError(400, "toolrt: Content-Length must be one number")
    return int(next(iter(lengths))), False


def parse_request(head: bytes) -> ProxyRequest:
    """The request in `head` (through the blank line); ProxyRequestError if unusable."""
    text = head.decode("latin-1")
    lines = text.split("\r\n")
    while lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise ProxyRequestError(400, "toolrt: an empty request")
    method, target, version = _request_line(lines[0])
    headers = _headers(lines[1:])
    if method == "CONNECT":
        host, port = _authority(target, None)
        return ProxyRequest(method, host, port, "", version, headers)
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() != "http":
        if sep and scheme.lower() == "https":
            text = "toolrt: ask for https:// URLs with CONNECT (set HTTPS_PROXY)"
        else:
            text = "toolrt: this is a proxy: send CONNECT host:port or an absolute http:// URL"
        raise ProxyRequestError(400, text)
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:].split("#", 1)[0]
    host, port = _authority(authority, 80)
    if not path.startswith("/"):
        path = "/" + path
    hosts = [v for k, v in headers if k.lower() == "host"]
    if len(hosts) > 1:
        raise ProxyRequestError(400, "toolrt: a request has one Host header")
    if hosts and _authority(hosts[0], 80) != (host, port):
        text = f"toolrt: the Host header {hosts[0][:200]!r} must name the URL's host {authority!r}"
        raise ProxyRequestError(400, text)
    length, chunked = _framing(headers)
    return ProxyRequest(method, host, port, path, version, headers, length, chunked)


def upstream_head(request: ProxyRequest) -> bytes:
    """The head to send the origin server: origin-form, no hop-by-hop headers,
    `Connection: close` (one request per connection: no second request on it
    escapes the checks)."""
    named = {n.strip().lower() for v in request.header("connection") for n in v.split(",")}
    lines = [f"{request.method} {request.target} {request.version}"]
    if not request.header("host"):
        host = f"[{request.host}]" if ":" in request.host else request.host
        lines.append(f"Host: {host}" if request.port == 80 else f"Host: {host}:{request.port}")
    for name, value in request.headers:
        if name.lower() not in HOP_BY_HOP and name.lower() not in named:
            lines.append(f"{name}: {value}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _printable(text: str) -> str:
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in text)


def answer(status: int, text: str) -> bytes:
    """The proxy's own response: `text` as the body, and as the reason phrase,
    which clients that hide the body of a refused CONNECT still print."""
    line = _printable(text.splitlines()[0] if text else REASONS.get(status, ""))
    body = (text + "\n").encode()
    head = (
        f"HTTP/1.1 {status} {line}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"


# -- TLS ---------------------------------------------------------------------
NEED_MORE = "more"
NOT_TLS = "not-tls"
MALFORMED = "malformed"
HELLO = "hello"


def _handshake_bytes(data: bytes) -> tuple[str, bytes]:
    """The handshake payload carried by the leading TLS records of `data`."""
    payload = b""
    offset = 0
    while offset + 5 <= len(data):
        kind, major = data[offset], data[offset + 1]
        length = int.from_bytes(data[offset + 3 : offset + 5], "big")
        if kind != 22:
            return (NOT_TLS if offset == 0 else MALFORMED), b""
        if major != 3 or length == 0 or length > 16384 + 2048:
            return MALFORMED, b""
        if offset + 5 + length > len(data):
            break
        payload += data[offset + 5 : offset + 5 + length]
        offset += 5 + length
        if len(payload) >= 4 and len(payload) >= 4 + int.from_bytes(payload[1:4], "big"):
            return HELLO, payload
    if offset == 0 and data and data[0] != 22:
        return NOT_TLS, b""
    return NEED_MORE, payload


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            msg = f"{n} bytes wanted at {self.at} of {len(self.data)}"
            raise ValueError(msg)
        chunk = self.data[self.at : self.at + n]
        self.at += n
        return chunk

    def number(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def vector(self, length_bytes: int) -> bytes:
        return self.take(self.number(length_bytes))


def _server_name(hello: bytes) -> str | None:
    cursor = _Cursor(hello)
    if cursor.number(1) != 1:  # ClientHello
        msg = "a handshake message other than ClientHello"
        raise ValueError(msg)
    body = _Cursor(cursor.vector(3))
    body.take(2 + 32)  # legacy_version, random
    body.vector(1)  # session id
    body.vector(2)  # cipher suites
    body.vector(1)  # compression methods
    if body.at == len(body.data):
        return None  # no extensions at all
    extensions = _Cursor(body.vector(2))
    while extensions.at < len(extensions.data):
        kind = extensions.number(2)
        data = extensions.vector(2)
        if kind != 0:
            continue
        names = _Cursor(_Cursor(data).vector(2))
        while names.at < len(names.data):
            name_type = names.number(1)
            name = names.vector(2)
            if name_type == 0:
                return name.decode("ascii").lower().rstrip(".")
        return None
    return None


def client_hello_sni(data: bytes) -> tuple[str, str | None]:
    """(state, server name) of what a client sent first through a tunnel.

    state: NEED_MORE (read on), NOT_TLS (some other protocol), MALFORMED
    (TLS records that are not a readable ClientHello, or one too large),
    HELLO (then the name, or None when the client sent no SNI).
    """
    state, payload = _handshake_bytes(data)
    if state == NEED_MORE and len(data) >= MAX_CLIENT_HELLO:
        return MALFORMED, None
    if state != HELLO:
        return state, None
    try:
        return HELLO, _server_name(payload)
    except (ValueError, UnicodeDecodeError):
        return MALFORMED, None
