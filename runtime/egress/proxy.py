"""One session's egress proxy: CONNECT and absolute-URI HTTP to the hosts its policy names.

It listens on the unix socket in the session's relay directory; every
connection the sandbox's relay opens is one client. A client sends one
request: `CONNECT host:port` (the tunnel then carries TLS untouched, after
a look at the ClientHello's server name; anything but TLS is refused) or a
plain HTTP request with an absolute URL (forwarded in origin form with
`Connection: close`, so that each request on a connection is checked).
The proxy resolves names itself and dials only the address it vetted (no
rebinding between check and connect); IP literals and names resolving to non-global addresses are
refused unless the operator pinned the name.

Caps are per session: bytes moved (both directions, all connections) and
connections open at once; each connection closes after `idle_timeout_s`
without a byte either way. Connections open at once are also bounded per
tenant and daemon-wide (`shares.py`); a connection refused by a count is
answered and closed at once, so a flood of them holds no descriptors.
Refusals are HTTP answers whose text says why; the hosts refused and the
caps reached are kept for the calls' results (`mark`/`report_since`), and
every connection ends in one EgressEvent.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.agent.pipe import IDLE, LIMIT, Joint
from runtime.egress.http import (
    ESTABLISHED,
    HELLO,
    MALFORMED,
    MAX_HEAD,
    NEED_MORE,
    NOT_TLS,
    ProxyRequest,
    ProxyRequestError,
    answer,
    client_hello_sni,
    parse_request,
    upstream_head,
)
from runtime.egress.shares import ConnectionShares
from runtime.policy.addresses import (
    HostError,
    blocked_reason,
    ip_literal,
    looks_numeric,
    normalize_host,
)
from runtime.policy.hosts import NetworkPolicy

log = logging.getLogger(__name__)

CHUNK = 256 * 1024
# Connections the kernel queues before the proxy accepts them; asyncio also
# accepts up to this many at once before any is judged, so it bounds the
# descriptors of a burst (they come out of shares.fd_reserve). The relay
# waits while the queue is full (relay_server._dial): a burst is answered
# (429 beyond the cap), not refused.
BACKLOG = 16
# After answering a refusal, input is read and dropped this long (and at
# most this many reads) before closing.
LINGER_S = 1.0
LINGER_READS = 16
# Refused hosts and notes kept per session for the calls' results.
KEPT_RECORDS = 256
REPORTED_HOSTS = 20

# EgressEvent.decision
ALLOWED = "allowed"
DENIED = "denied"
LIMITED = "limited"
UNREACHABLE = "unreachable"
MALFORMED_REQUEST = "malformed"


# A tunnel carries TLS only: plain HTTP in it could name any site in the Host
# header of any of its requests, and a server shared by several sites (a CDN)
# would route to that one. Plain HTTP goes as absolute URLs, each checked.
PLAINTEXT_IN_TUNNEL = (
    "toolrt: a CONNECT tunnel carries TLS only; send plain http:// requests "
    "through the proxy as absolute URLs (HTTP_PROXY), whose Host header it checks"
)


def denial_text(host: str) -> str:
    """What a refused client reads (the issue's wording, exactly)."""
    return f"toolrt: {host} is not in this session's network allowlist"


@dataclass(frozen=True)
class EgressEvent:
    """One proxied connection, as it ended (the audit log's `network` event)."""

    session_id: str
    host: str
    port: int
    decision: str
    # From the upstream to the sandbox, and from the sandbox upstream.
    bytes_in: int = 0
    bytes_out: int = 0
    reason: str = ""
    tenant: str = ""


EventSink = Callable[[EgressEvent], None]
Resolver = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True)
class ProxySettings:
    idle_timeout_s: float = 120.0
    connect_timeout_s: float = 10.0
    # Operator-pinned names → address (no resolution, no range check).
    pins: Mapping[str, str] = field(default_factory=dict)
    # Refuse a tunnel whose TLS server name is not the CONNECT host.
    sni_check: bool = True
    # The TCP ports the daemon itself listens on (gRPC, metrics), filled in
    # as it binds them: never dialled on an address of this host.
    own_ports: set[int] = field(default_factory=set)


def is_local(address: str) -> bool:
    """Is `address` one of this host's (the kernel lets a socket bind it)?"""
    ip = ipaddress.ip_address(address)
    if ip.is_loopback or ip.is_unspecified:
        return True
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


async def system_resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to, in the resolver's order, once each."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class Refused(Exception):
    """A request the proxy answers itself instead of serving."""

    def __init__(self, status: int, text: str, decision: str, denied: str = "") -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.decision = decision
        # The host to list in the call's network_denied ("" for none).
        self.denied = denied


class Cut(Exception):
    """A connection ended by the proxy mid-way (a cap, silence, a bad ClientHello)."""

    def __init__(self, decision: str, reason: str) -> None:
        super().__init__(reason)
        self.decision = decision
        self.reason = reason


@dataclass
class _Conn:
    host: str = ""
    port: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    last: float = 0.0


class SessionProxy:
    def __init__(
        self,
        session_id: str,
        policy: NetworkPolicy,
        settings: ProxySettings,
        on_event: EventSink | None = None,
        resolve: Resolver = system_resolve,
        tenant: str = "",
        shares: ConnectionShares | None = None,
    ) -> None:
        self.session_id = session_id
        self.policy = policy
        self.settings = settings
        self._on_event = on_event
        self._resolve = resolve
        self.tenant = tenant
        self._shares = shares
        self._server: asyncio.AbstractServer | None = None
        self._path = ""
        self._tasks: set[asyncio.Task[Any]] = set()
        self.open_connections = 0
        self.bytes_moved = 0
        self._seq = 0
        self._denied: deque[tuple[int, str]] = deque(maxlen=KEPT_RECORDS)
        self._notes: deque[tuple[int, str]] = deque(maxlen=KEPT_RECORDS)

    # -- lifecycle ----------------------------------------------------------
    async def start(self, path: str) -> None:
        """Listen on the unix socket `path` (0600: the sandbox's root connects)."""
        self._server = await asyncio.start_unix_server(
            self._accept, path=path, limit=MAX_HEAD, backlog=BACKLOG
        )
        os.chmod(path, 0o600)
        self._path = path

    async def close(self) -> None:
        """Stop listening, cut every connection, remove the socket."""
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    # -- what the calls' results say ------------------------------------------
    def mark(self) -> int:
        return self._seq

    def report_since(self, mark: int) -> dict[str, Any]:
        """`network_denied` hosts and a `network_note` on caps, since `mark`."""
        hosts = list(dict.fromkeys(h for seq, h in self._denied if seq > mark))
        notes = list(dict.fromkeys(n for seq, n in self._notes if seq > mark))
        report: dict[str, Any] = {}
        if hosts:
            report["network_denied"] = hosts[:REPORTED_HOSTS]
        if notes:
            report["network_note"] = "; ".join(notes[:3])
        return report

    def _deny(self, host: str) -> None:
        self._seq += 1
        self._denied.append((self._seq, host))

    def _note(self, text: str) -> None:
        self._seq += 1
        self._notes.append((self._seq, text))

    # -- one connection -----------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        conn = _Conn(last=asyncio.get_running_loop().time())
        decision, reason = MALFORMED_REQUEST, ""
        try:
            status, reason = self._count_in()
            if status:
                decision = LIMITED
                self._note(reason)
                self._answer_now(writer, status, f"toolrt: {reason}")
                return
            try:
                decision, reason = await self._serve(reader, writer, conn)
            finally:
                self._count_out()
        except asyncio.CancelledError:
            # The session closed. Not re-raised: this task is the server's
            # callback, whose result asyncio reads (and logs if cancelled).
            decision, reason = (ALLOWED if conn.host else MALFORMED_REQUEST), "the session closed"
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)
            self._emit(conn, decision, reason)

    def _count_in(self) -> tuple[int, str]:
        """Count a new connection in: (0, "") or the status and reason it is refused with."""
        if self.open_connections >= self.policy.max_connections:
            return 429, (
                f"this session already holds its {self.policy.max_connections} proxy "
                "connections (network.max_connections); more were refused until some close"
            )
        if self._shares is not None:
            status, reason = self._shares.admit(self.tenant)
            if status:
                return status, reason
        self.open_connections += 1
        return 0, ""

    def _count_out(self) -> None:
        self.open_connections -= 1
        if self._shares is not None:
            self._shares.release(self.tenant)

    @staticmethod
    def _answer_now(writer: asyncio.StreamWriter, status: int, text: str) -> None:
        """Answer and let the caller close at once (a flood must not hold
        descriptors), dropping the input that already arrived first: closing
        with unread input resets the connection, and the answer with it."""
        writer.write(answer(status, text))
        sock = writer.get_extra_info("socket")
        if sock is None:
            return
        with contextlib.suppress(OSError):  # BlockingIOError: nothing more yet
            for _ in range(LINGER_READS):
                if not os.read(sock.fileno(), CHUNK):
                    break

    async def _reply(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int, text: str
    ) -> None:
        """Answer, then read what the client still sends for a moment: closing
        with unread input resets the connection, and the answer with it."""
        with contextlib.suppress(OSError, TimeoutError, asyncio.LimitOverrunError):
            writer.write(answer(status, text))
            await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
            async with asyncio.timeout(LINGER_S):
                for _ in range(LINGER_READS):
                    if not await reader.read(CHUNK):
                        break

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Conn
    ) -> tuple[str, str]:
        try:
            async with asyncio.timeout(self.settings.connect_timeout_s):
                head = await reader.readuntil(b"\r\n\r\n")
            request = parse_request(head)
        except (TimeoutError, asyncio.IncompleteReadError, OSError):
            return MALFORMED_REQUEST, "no complete request"
        except asyncio.LimitOverrunError:
            text = f"toolrt: a request head is at most {MAX_HEAD} bytes"
            await self._reply(reader, writer, 431, text)
            return MALFORMED_REQUEST, text
        except ProxyRequestError as exc:
            await self._reply(reader, writer, exc.status, exc.text)
            return MALFORMED_REQUEST, exc.text
        conn.host, conn.port = request.host, request.port
        try:
            host, addresses = await self._admit(request)
            upstream_r, upstream_w = await self._dial(host, addresses, request.port)
        except Refused as refusal:
            if refusal.denied:
                self._deny(refusal.denied)
            await self._reply(reader, writer, refusal.status, refusal.text)
            return refusal.decision, refusal.text
        try:
            if request.connect:
                await self._tunnel(reader, writer, upstream_r, upstream_w, conn, host)
            else:
                await self._forward(reader, writer, upstream_r, upstream_w, conn, request)
        except Cut as cut:
            return cut.decision, cut.reason
        except (OSError, asyncio.IncompleteReadError) as exc:
            return ALLOWED, f"ended: {type(exc).__name__}"
        finally:
            upstream_w.close()
        return ALLOWED, ""

    # -- the decision -------------------------------------------------------
    async def _admit(self, request: ProxyRequest) -> tuple[str, list[str]]:
        """The normalized host and the vetted addresses to dial; Refused otherwise."""
        shown = f"[{request.host}]" if ":" in request.host else request.host
        if ip_literal(request.host) is not None or looks_numeric(request.host):
            raise Refused(403, denial_text(shown), DENIED, shown)
        try:
            host = normalize_host(request.host)
        except HostError as exc:
            raise Refused(403, denial_text(shown), DENIED, shown) from exc
        if not self.policy.admits(host, request.port):
            # Name the port when the host is allowed on others.
            on_other_port = any(p.matches_host(host) for p in self.policy.allow)
            named = f"{host}:{request.port}" if on_other_port else host
            raise Refused(403, denial_text(named), DENIED, named)
        if self.bytes_moved >= self.policy.max_bytes:
            raise Refused(403, f"toolrt: {self._byte_cap_text()}", LIMITED)
        pinned = self.settings.pins.get(host)
        if pinned:
            return host, self._not_own(host, request.port, [pinned])
        try:
            async with asyncio.timeout(self.settings.connect_timeout_s):
                addresses = await self._resolve(host, request.port)
        except (OSError, TimeoutError) as exc:
            text = f"toolrt: cannot resolve {host}: {exc or 'timed out'}"
            raise Refused(502, text, UNREACHABLE) from exc
        if not addresses:
            raise Refused(502, f"toolrt: {host} has no address", UNREACHABLE)
        for address in addresses:
            reason = blocked_reason(ipaddress.ip_address(address))
            if reason:
                text = (
                    f"toolrt: {host} resolves to {address}, a {reason} address, which "
                    "sessions may not reach (an operator can pin a mirror's name in "
                    "[network.hosts])"
                )
                raise Refused(403, text, DENIED, host)
        return host, self._not_own(host, request.port, addresses)

    def _not_own(self, host: str, port: int, addresses: list[str]) -> list[str]:
        """`addresses`, unless one is this host's on a port toolrt listens on:
        a pin or a name resolving to this host must not lead to toolrt itself."""
        if port in self.settings.own_ports:
            for address in addresses:
                if is_local(address):
                    text = (
                        f"toolrt: {host}:{port} leads to {address}:{port}, toolrt's own port "
                        "on this host, which sessions may not reach"
                    )
                    raise Refused(403, text, DENIED, f"{host}:{port}")
        return addresses

    def _byte_cap_text(self) -> str:
        return (
            f"this session has moved its {self.policy.max_bytes} bytes through the network "
            "proxy (network.max_bytes); its connections are cut and new ones refused"
        )

    async def _dial(
        self, host: str, addresses: list[str], port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        problem = ""
        try:
            async with asyncio.timeout(self.settings.connect_timeout_s):
                for address in addresses:
                    try:
                        return await asyncio.open_connection(address, port, limit=CHUNK)
                    except OSError as exc:
                        problem = exc.strerror or str(exc)
        except TimeoutError:
            text = f"toolrt: connecting to {host}:{port} timed out"
            raise Refused(504, text, UNREACHABLE) from None
        raise Refused(502, f"toolrt: cannot connect to {host}:{port}: {problem}", UNREACHABLE)

    # -- moving bytes -------------------------------------------------------
    async def _read(self, src: asyncio.StreamReader, conn: _Conn, size: int = CHUNK) -> bytes:
        """Up to `size` bytes; Cut when the connection was silent both ways too long."""
        loop = asyncio.get_running_loop()
        idle = self.settings.idle_timeout_s
        while True:
            try:
                async with asyncio.timeout(idle):
                    data = await src.read(size)
            except TimeoutError:
                if loop.time() - conn.last >= idle:
                    raise Cut(ALLOWED, f"idle for {idle:g} s") from None
                continue
            conn.last = loop.time()
            return data

    def _budget(self, size: int, inbound: bool) -> int:
        """How many of `size` bytes may pass under the session's byte cap (counted)."""
        allowed = max(0, min(size, self.policy.max_bytes - self.bytes_moved))
        self.bytes_moved += allowed
        return allowed

    def _capped(self, conn: _Conn) -> Cut:
        text = self._byte_cap_text()
        self._note(text.replace("its connections are", f"{conn.host}:{conn.port} was"))
        return Cut(LIMITED, text)

    async def _send(
        self, dst: asyncio.StreamWriter, data: bytes, conn: _Conn, inbound: bool
    ) -> None:
        allowed = self._budget(len(data), inbound)
        dst.write(data if allowed == len(data) else data[:allowed])
        if inbound:
            conn.bytes_in += allowed
        else:
            conn.bytes_out += allowed
        conn.last = asyncio.get_running_loop().time()
        if allowed < len(data):
            raise self._capped(conn)
        await dst.drain()

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, conn: _Conn
    ) -> None:
        """The upstream's answer to the client, until the upstream closes."""
        while data := await self._read(src, conn):
            await self._send(dst, data, conn, inbound=True)

    async def _exact(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, conn: _Conn, size: int
    ) -> None:
        while size > 0:
            data = await self._read(src, conn, min(size, CHUNK))
            if not data:
                raise Cut(ALLOWED, "the client closed before its request body ended")
            await self._send(dst, data, conn, inbound=False)
            size -= len(data)

    async def _line(self, src: asyncio.StreamReader, conn: _Conn) -> bytes:
        try:
            async with asyncio.timeout(self.settings.idle_timeout_s):
                line = await src.readuntil(b"\r\n")
        except (TimeoutError, asyncio.LimitOverrunError) as exc:
            raise Cut(MALFORMED_REQUEST, "an unreadable chunked request body") from exc
        conn.last = asyncio.get_running_loop().time()
        return line

    async def _request_body(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        conn: _Conn,
        request: ProxyRequest,
    ) -> None:
        """Exactly the first request's body; nothing the client sends after it."""
        if not request.chunked:
            await self._exact(src, dst, conn, request.content_length)
            return
        while True:
            line = await self._line(src, conn)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise Cut(MALFORMED_REQUEST, "an unreadable chunked request body") from None
            await self._send(dst, line, conn, inbound=False)
            if size == 0:
                while line != b"\r\n":  # trailers, then the blank line
                    line = await self._line(src, conn)
                    await self._send(dst, line, conn, inbound=False)
                return
            await self._exact(src, dst, conn, size + 2)

    async def _together(
        self, main: Coroutine[Any, Any, None], side: Coroutine[Any, Any, None]
    ) -> None:
        """`main` to its end with `side` beside it; a failure of either ends both."""
        main_task, side_task = asyncio.ensure_future(main), asyncio.ensure_future(side)
        pending: set[asyncio.Future[None]] = {main_task, side_task}
        try:
            while main_task in pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if not task.cancelled() and task.exception() is not None:
                        raise task.exception()  # type: ignore[misc]
        finally:
            for task in (main_task, side_task):
                task.cancel()
            await asyncio.gather(main_task, side_task, return_exceptions=True)

    async def _tunnel(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream_r: asyncio.StreamReader,
        upstream_w: asyncio.StreamWriter,
        conn: _Conn,
        host: str,
    ) -> None:
        writer.write(ESTABLISHED)
        await writer.drain()
        if self.settings.sni_check:
            try:
                first = await self._client_hello(reader, conn, host)
            except Cut as cut:
                if cut.reason == PLAINTEXT_IN_TUNNEL:
                    # Into the tunnel: a plain HTTP client reads it as the answer.
                    writer.write(answer(403, cut.reason))
                    with contextlib.suppress(OSError):
                        await writer.drain()
                raise
            if first:
                await self._send(upstream_w, first, conn, inbound=False)
        # TLS passes untouched: the two connections are joined back to back.
        joint = Joint((reader, writer), (upstream_r, upstream_w), self._budget)
        ended = await joint.run(self.settings.idle_timeout_s)
        conn.bytes_in += joint.upstream.bytes
        conn.bytes_out += joint.client.bytes
        if ended == LIMIT:
            raise self._capped(conn)
        if ended == IDLE:
            raise Cut(ALLOWED, f"idle for {self.settings.idle_timeout_s:g} s")

    async def _client_hello(self, reader: asyncio.StreamReader, conn: _Conn, host: str) -> bytes:
        """The client's first bytes, read until its ClientHello is whole; Cut
        when it names another server (domain fronting) or cannot be read."""
        data = b""
        state, name = NEED_MORE, None
        while state == NEED_MORE:
            chunk = await self._read(reader, conn)
            if not chunk:
                return data
            data += chunk
            state, name = client_hello_sni(data)
        if state == MALFORMED:
            self._deny(host)
            raise Cut(DENIED, "a TLS ClientHello the proxy cannot read")
        if state == NOT_TLS:
            self._deny(host)
            raise Cut(DENIED, PLAINTEXT_IN_TUNNEL)
        if state == HELLO and name is not None and name != host:
            self._deny(name)
            raise Cut(DENIED, f"the TLS server name {name} is not the CONNECT host {host}")
        return data

    async def _forward(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream_r: asyncio.StreamReader,
        upstream_w: asyncio.StreamWriter,
        conn: _Conn,
        request: ProxyRequest,
    ) -> None:
        await self._send(upstream_w, upstream_head(request), conn, inbound=False)
        await self._together(
            self._pump(upstream_r, writer, conn),
            self._request_body(reader, upstream_w, conn, request),
        )

    # -- reporting ----------------------------------------------------------
    def _emit(self, conn: _Conn, decision: str, reason: str) -> None:
        event = EgressEvent(
            self.session_id,
            conn.host,
            conn.port,
            decision,
            conn.bytes_in,
            conn.bytes_out,
            reason,
            self.tenant,
        )
        # Logged by the hook (core.py), once the session's secrets are out of it.
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:  # noqa: BLE001 - a hook must not break the proxy
                log.exception("egress event hook failed")
