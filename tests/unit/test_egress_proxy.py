"""One session's proxy in-process, on a unix socket, against upstreams on
127.0.0.1 (pinned test names): forwarding, refusals, caps, timeouts, close.
The same proxy behind a real sandbox is tests/docker/test_egress.py."""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from runtime.egress.proxy import EgressEvent, ProxySettings, SessionProxy
from runtime.policy.hosts import NetworkPolicy, parse_patterns
from tests.helpers import exchange, resolve_to_loopback

Upstream = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def echo_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers with everything it received until the client stops sending."""
    received = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), 0.3):
            received += chunk
    except TimeoutError:
        pass
    body = received
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    writer.close()


async def big(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4000000\r\n\r\n")
    for _ in range(4000000 // 40000):
        writer.write(b"x" * 40000)
        await writer.drain()
    writer.close()


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(30)


def run(
    upstream: Upstream,
    scenario: Callable[[SessionProxy, str, int], Awaitable[Any]],
    tmp_path: Any,
    allow: tuple[str, ...] = ("*.test:*",),
    max_bytes: int = 1 << 30,
    max_connections: int = 8,
    idle: float = 5.0,
    events: list[EgressEvent] | None = None,
    upstream_is_the_daemons: bool = False,
) -> Any:
    async def main() -> Any:
        handlers: set[asyncio.Task[Any]] = set()

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            handlers.add(task)
            try:
                await upstream(reader, writer)
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        policy = NetworkPolicy(parse_patterns(allow, "t"), max_bytes, max_connections)
        settings = ProxySettings(
            idle_timeout_s=idle, connect_timeout_s=2, pins={"up.test": "127.0.0.1"}
        )
        if upstream_is_the_daemons:
            settings.own_ports.add(port)
        proxy = SessionProxy(
            "s1",
            policy,
            settings,
            events.append if events is not None else None,
            resolve_to_loopback,
        )
        path = str(tmp_path / "proxy.sock")
        await proxy.start(path)
        try:
            return await scenario(proxy, path, port)
        finally:
            await proxy.close()
            server.close()
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

    return asyncio.run(main())


def test_plain_http_is_forwarded_once_in_origin_form(tmp_path):
    async def scenario(proxy: SessionProxy, path: str, port: int) -> bytes:
        request = (
            f"POST http://up.test:{port}/p HTTP/1.1\r\nHost: up.test:{port}\r\n"
            "Proxy-Authorization: secret\r\nContent-Length: 5\r\n\r\nhello"
            # A second request on the connection never reaches the upstream.
            f"GET http://evil.test:{port}/ HTTP/1.1\r\n\r\n"
        )
        return await exchange(path, request.encode())

    events: list[EgressEvent] = []
    reply = run(echo_head, scenario, tmp_path, events=events)
    body = reply.split(b"\r\n\r\n", 1)[1]
    assert body.startswith(b"POST /p HTTP/1.1\r\nHost: up.test:")
    assert b"Proxy-Authorization" not in body
    assert body.endswith(b"Connection: close\r\n\r\nhello")
    assert b"evil.test" not in body
    [event] = events
    assert (event.host, event.decision, event.bytes_in) == ("up.test", "allowed", len(reply))


def test_a_chunked_body_is_forwarded_to_its_last_chunk(tmp_path):
    async def scenario(proxy: SessionProxy, path: str, port: int) -> bytes:
        request = (
            f"POST http://up.test:{port}/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            "5;ext=1\r\nhello\r\n3\r\nabc\r\n0\r\nTrailer: x\r\n\r\nEXTRA"
        )
        return await exchange(path, request.encode())

    body = run(echo_head, scenario, tmp_path).split(b"\r\n\r\n", 1)[1]
    assert body.endswith(b"5;ext=1\r\nhello\r\n3\r\nabc\r\n0\r\nTrailer: x\r\n\r\n")


def test_refusals_are_answered_and_reported(tmp_path):
    async def scenario(proxy: SessionProxy, path: str, port: int) -> list[bytes]:
        mark = proxy.mark()
        replies = [
            await exchange(path, f"GET http://evil.test:{port}/ HTTP/1.1\r\n\r\n".encode()),
            await exchange(path, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode()),
            await exchange(path, f"CONNECT [::ffff:7f00:1]:{port} HTTP/1.1\r\n\r\n".encode()),
            await exchange(path, f"CONNECT rebind.test:{port} HTTP/1.1\r\n\r\n".encode()),
            await exchange(
                path, f"GET http://up.test:{port}/ HTTP/1.1\r\nHost: x.test\r\n\r\n".encode()
            ),
            await exchange(path, b"garbage\r\n\r\n"),
        ]
        assert proxy.report_since(mark) == {
            "network_denied": ["evil.test", "127.0.0.1", "[::ffff:7f00:1]", "rebind.test"]
        }
        assert proxy.report_since(proxy.mark()) == {}
        return replies

    replies = run(echo_head, scenario, tmp_path, allow=("up.test:*", "rebind.test:*"))
    statuses = [r.split(b"\r\n")[0] for r in replies]
    assert (
        statuses[0] == b"HTTP/1.1 403 toolrt: evil.test is not in this session's network allowlist"
    )
    assert statuses[1].startswith(b"HTTP/1.1 403 toolrt: 127.0.0.1 is not")
    assert statuses[2].startswith(b"HTTP/1.1 403 toolrt: [::ffff:7f00:1] is not")
    assert statuses[3].startswith(
        b"HTTP/1.1 403 toolrt: rebind.test resolves to 127.0.0.1, a loopback"
    )
    assert statuses[4].startswith(b"HTTP/1.1 400 toolrt: the Host header")
    assert statuses[5].startswith(b"HTTP/1.1 400")


def test_connections_over_the_cap_get_429(tmp_path):
    async def scenario(proxy: SessionProxy, path: str, port: int) -> list[bytes]:
        held = [await asyncio.open_unix_connection(path) for _ in range(2)]
        await asyncio.sleep(0.05)
        assert proxy.open_connections == 2
        over = await exchange(path, f"CONNECT up.test:{port} HTTP/1.1\r\n\r\n".encode())
        for _, writer in held:
            writer.close()
        await asyncio.sleep(0.05)
        again = await exchange(path, f"GET http://up.test:{port}/ HTTP/1.1\r\n\r\n".encode())
        return [over, again, proxy.report_since(0)]

    over, again, report = run(echo_head, scenario, tmp_path, max_connections=2)
    assert over.startswith(b"HTTP/1.1 429 toolrt: this session already holds its 2 proxy")
    assert again.startswith(b"HTTP/1.1 200 OK")
    assert "network.max_connections" in report["network_note"]


def test_the_byte_cap_cuts_and_then_refuses(tmp_path):
    async def scenario(proxy: SessionProxy, path: str, port: int) -> list[Any]:
        cut = await exchange(path, f"GET http://up.test:{port}/ HTTP/1.1\r\n\r\n".encode())
        after = await exchange(path, f"GET http://up.test:{port}/ HTTP/1.1\r\n\r\n".encode())
        return [cut, after, proxy.bytes_moved, proxy.report_since(0)]

    cut, after, moved, report = run(big, scenario, tmp_path, max_bytes=100_000)
    assert moved == 100_000
    assert len(cut) < 100_000
    assert after.startswith(b"HTTP/1.1 403 toolrt: this session has moved its 100000 bytes")
    assert "up.test:" in report["network_note"] and "network.max_bytes" in report["network_note"]


def test_silent_connections_are_closed(tmp_path):
    async def scenario(proxy: SessionProxy, path: str, port: int) -> bytes:
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(f"CONNECT up.test:{port} HTTP/1.1\r\n\r\n".encode())
        data = await asyncio.wait_for(reader.read(), 3)
        writer.close()
        return data

    events: list[EgressEvent] = []
    assert (
        run(silent, scenario, tmp_path, idle=0.3, events=events)
        == b"HTTP/1.1 200 Connection established\r\n\r\n"
    )
    assert events[0].reason == "idle for 0.3 s"


def tls_hello(server_name: str) -> bytes:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_a_tunnel_must_name_its_connect_host_in_the_client_hello(tmp_path):
    async def scenario(proxy: SessionProxy, path: str, port: int) -> list[Any]:
        fronted = await exchange(
            path, f"CONNECT up.test:{port} HTTP/1.1\r\n\r\n".encode() + tls_hello("other.test")
        )
        report = proxy.report_since(0)
        same = await exchange(
            path, f"CONNECT up.test:{port} HTTP/1.1\r\n\r\n".encode() + tls_hello("up.test"), wait=3
        )
        return [fronted, report, same]

    fronted, report, same = run(echo_head, scenario, tmp_path)
    assert fronted == b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert report == {"network_denied": ["other.test"]}
    # The hello went through, and the echo upstream answered with it.
    assert b"HTTP/1.1 200 OK" in same and b"up.test" in same


def test_a_tunnel_carries_tls_only_so_no_plain_host_header_escapes_the_check(tmp_path):
    # Plain HTTP in a tunnel could name any site in its Host header (on any
    # of its requests): the CONNECT host's server would route to it.
    async def scenario(proxy: SessionProxy, path: str, port: int) -> list[Any]:
        smuggled = await exchange(
            path,
            f"CONNECT up.test:{port} HTTP/1.1\r\n\r\n".encode()
            + b"GET / HTTP/1.1\r\nHost: other.example\r\n\r\n",
        )
        return [smuggled, proxy.report_since(0)]

    events: list[EgressEvent] = []
    smuggled, report = run(echo_head, scenario, tmp_path, events=events)
    established, refusal = smuggled.split(b"\r\n\r\n", 1)
    assert established == b"HTTP/1.1 200 Connection established"
    assert refusal.startswith(b"HTTP/1.1 403 toolrt: a CONNECT tunnel carries TLS only"), smuggled
    assert b"other.example" not in smuggled  # the upstream never saw it
    assert report == {"network_denied": ["up.test"]}
    assert [e.decision for e in events] == ["denied"]


def test_the_daemons_own_ports_are_never_dialled_whatever_a_pin_says(tmp_path):
    async def scenario(proxy: SessionProxy, path: str, port: int) -> list[Any]:
        return [
            await exchange(path, f"GET http://up.test:{port}/ HTTP/1.1\r\n\r\n".encode()),
            await exchange(path, f"CONNECT up.test:{port} HTTP/1.1\r\n\r\n".encode()),
            proxy.report_since(0),
            port,
        ]

    *answers, report, port = run(echo_head, scenario, tmp_path, upstream_is_the_daemons=True)
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 403 toolrt: up.test:"), answer
        assert b"toolrt's own port" in answer, answer
    assert report == {"network_denied": [f"up.test:{port}"]}


def test_close_cuts_connections_and_removes_the_socket(tmp_path):
    async def scenario(proxy: SessionProxy, path: str, port: int) -> list[Any]:
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(f"CONNECT up.test:{port} HTTP/1.1\r\n\r\n".encode())
        await reader.readuntil(b"\r\n\r\n")
        await proxy.close()
        ended = await asyncio.wait_for(reader.read(), 2)
        writer.close()
        return [ended, os.path.exists(path)]

    assert run(silent, scenario, tmp_path) == [b"", False]
