"""Local upstreams for the egress tests, on 127.0.0.1 only: plain HTTP, TLS
with a certificate authority made for the test, and a PyPI-style simple
index serving a wheel built here. No traffic leaves this machine.

Routes (both servers): `/` says hello to the Host it was asked for,
`/big?bytes=N` sends N bytes, `/hold?s=S` answers after S seconds,
`/simple/` and `/simple/toypkg/` are the index, `/packages/<wheel>` the wheel.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import ssl
import subprocess
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

WHEEL_NAME = "toypkg-0.1-py3-none-any.whl"
TOYPKG_VALUE = "toypkg works"
# Names the TLS certificate is valid for.
TLS_NAMES = ("secure.test", "other.test", "pypi.test")


def build_wheel() -> bytes:
    """A pure-Python wheel of package `toypkg` (one module, METADATA, WHEEL, RECORD)."""
    files = {
        "toypkg/__init__.py": f"VALUE = {TOYPKG_VALUE!r}\n".encode(),
        "toypkg-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: toypkg\nVersion: 0.1\n",
        "toypkg-0.1.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: toolrt-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("toypkg-0.1.dist-info/RECORD,,")
    files["toypkg-0.1.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


class Handler(BaseHTTPRequestHandler):
    wheel = b""

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes, kind: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if url.path == "/":
            host = (self.headers.get("Host") or "").split(":")[0]
            self._send(200, f"hello from {host}\n".encode())
        elif url.path == "/big":
            size = int(query["bytes"][0])
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            chunk = b"x" * 65536
            with contextlib.suppress(OSError):
                while size > 0:
                    self.wfile.write(chunk[:size])
                    size -= len(chunk)
        elif url.path == "/hold":
            time.sleep(float(query["s"][0]))
            self._send(200, b"held\n")
        elif url.path in ("/simple", "/simple/"):
            self._send(200, b'<html><body><a href="toypkg/">toypkg</a></body></html>', "text/html")
        elif url.path in ("/simple/toypkg", "/simple/toypkg/"):
            digest = hashlib.sha256(self.wheel).hexdigest()
            link = f'<a href="/packages/{WHEEL_NAME}#sha256={digest}">{WHEEL_NAME}</a>'
            self._send(200, f"<html><body>{link}</body></html>".encode(), "text/html")
        elif url.path == f"/packages/{WHEEL_NAME}":
            self._send(200, self.wheel, "application/octet-stream")
        else:
            self._send(404, b"not found\n")


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) made with openssl."""
    ca_key, ca = directory / "ca.key", directory / "ca.pem"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.pem"
    ext = directory / "server.ext"
    names = ",".join(f"DNS:{name}" for name in TLS_NAMES)
    ext.write_text(
        f"subjectAltName={names}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    commands = [
        ["openssl", "req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2",
         "-subj", "/CN=toolrt test CA", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ["openssl", "req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=secure.test"],
        ["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
         "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext],
    ]  # fmt: skip
    for command in commands:
        subprocess.run([str(c) for c in command], check=True, capture_output=True)
    return ca, cert, key


@dataclass
class Upstreams:
    http_port: int
    tls_port: int
    ca_pem: str


@contextlib.contextmanager
def upstreams(directory: Path) -> Iterator[Upstreams]:
    """Both servers, running on threads until the block ends."""
    Handler.wheel = build_wheel()
    ca, cert, key = make_certificates(directory)
    plain = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    secure = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    # The handshake happens on the handler's thread, never in accept().
    secure.socket = context.wrap_socket(
        secure.socket, server_side=True, do_handshake_on_connect=False
    )
    servers = (plain, secure)
    for server in servers:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield Upstreams(plain.server_address[1], secure.server_address[1], ca.read_text())
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
