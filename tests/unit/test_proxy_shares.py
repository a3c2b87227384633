"""Proxy connections every session shares: a tenant's share, the daemon's total, the fd reserve."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from runtime.config import SharesConfig
from runtime.descriptors import Descriptors
from runtime.egress.proxy import ProxySettings, SessionProxy
from runtime.egress.shares import ConnectionShares
from runtime.policy.hosts import NetworkPolicy, parse_patterns
from tests.helpers import exchange, resolve_to_loopback

CONNECT = b"CONNECT up.test:443 HTTP/1.1\r\n\r\n"


def test_tenants_hold_their_share_of_proxy_connections_within_the_daemons(tmp_path: Path):
    refused: list[str] = []
    free = {"fds": 1000}
    limit, reserve = 10_000, 16
    ticks = itertools.count()
    descriptors = Descriptors(
        reserve,
        limit=lambda: limit,
        count=lambda: limit - reserve - free["fds"],
        clock=lambda: float(next(ticks)),  # every check counts afresh
    )
    config = SharesConfig(proxy_connections=4, proxy_connections_per_tenant=2)
    shares = ConnectionShares(config, descriptors, refused.append)

    async def main() -> list[bytes]:
        policy = NetworkPolicy(parse_patterns(("*.test:*",), "t"), 1 << 30, 8)
        settings = ProxySettings(connect_timeout_s=30, pins={"up.test": "127.0.0.1"})
        proxies = []
        for session_id, tenant in [("a1", "alice"), ("a2", "alice"), ("b1", "bob"), ("c1", "c")]:
            proxy = SessionProxy(
                session_id, policy, settings, None, resolve_to_loopback, tenant, shares
            )
            await proxy.start(str(tmp_path / f"{session_id}.sock"))
            proxies.append(proxy)
        held = []

        async def hold(session_id: str, total: int) -> None:
            # A connection that sends nothing: held until connect_timeout_s.
            held.append(await asyncio.open_unix_connection(str(tmp_path / f"{session_id}.sock")))
            while shares.total < total:
                await asyncio.sleep(0.01)

        def ask(session_id: str) -> asyncio.Future[bytes]:
            return asyncio.ensure_future(exchange(str(tmp_path / f"{session_id}.sock"), CONNECT))

        try:
            await hold("a1", 1)
            await hold("a2", 2)
            replies = [await ask("a1")]  # alice's share is full, in either session
            await hold("b1", 3)
            await hold("c1", 4)
            replies.append(await ask("b1"))  # the daemon's total is full
            _, writer = held.pop()
            writer.close()
            while shares.total > 3:
                await asyncio.sleep(0.01)
            free["fds"] = 1
            replies.append(await ask("b1"))  # the fd reserve would be touched
            return replies
        finally:
            for _, writer in held:
                writer.close()
            for proxy in proxies:
                await proxy.close()

    tenant, total, fds = asyncio.run(main())
    assert tenant.startswith(b"HTTP/1.1 429 toolrt: this tenant's sessions already hold 2 ")
    assert b"(shares.proxy_connections_per_tenant)" in tenant
    assert total.startswith(b"HTTP/1.1 503 toolrt: the daemon holds the 4 proxy connections")
    assert b"(shares.proxy_connections)" in total
    assert fds.startswith(b"HTTP/1.1 503 toolrt: the daemon is short of file descriptors")
    assert b"(shares.fd_reserve)" in fds
    assert refused == ["proxy_connections_per_tenant", "proxy_connections", "fd_reserve"]
    assert shares.total == 0 and shares.open_of("alice") == 0
