"""Every session's egress proxy, the policy checks, and the hooks others plug into.

The proxy runs in the daemon, on its event loop, rather than in a process
of its own: a session's proxy lives exactly as long as the session (opened
and closed in the same await as the sandbox), the call path reads the
hosts it refused without any IPC, and there is no second process to
supervise, restart or reap. The cost is that proxied bytes are copied on
the daemon's loop: bounded per session by `network.max_bytes` and
`max_connections`, and measured in the README.

Two hooks:
- `ceilings_for(config, tenant)`: every ceiling a tenant's patterns must fit
  (`network.allow_max`, and the tenant's `network_allow_max` when it has one).
- `Egress.on_event`: called with every EgressEvent (the audit log's
  `network` event, the `toolrt_egress_connections_total{decision}` metric).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from runtime.agent.protocol import RELAY_PORT
from runtime.config import Config
from runtime.descriptors import Descriptors
from runtime.egress.proxy import (
    EgressEvent,
    EventSink,
    ProxySettings,
    Resolver,
    SessionProxy,
    system_resolve,
)
from runtime.egress.shares import ConnectionShares
from runtime.errors import BadRequest, PermissionDenied
from runtime.policy.hosts import (
    Ceiling,
    NetworkPolicy,
    PatternError,
    clamp_cap,
    outside,
    over_loopback_pins,
    parse_patterns,
)
from runtime.sandbox.relay_dirs import (
    egress_enabled,
    relay_dirs,
    remove_relay_dir,
    socket_path,
    socket_path_problem,
    socket_root,
)

log = logging.getLogger(__name__)

NO_PROXY = "localhost,127.0.0.1"


@dataclass
class NetworkRequest:
    """What a client asked for in `CreateSessionRequest.network` (0: the maximum)."""

    allow: list[str] = field(default_factory=list)
    max_bytes: int = 0
    max_connections: int = 0


def ceilings_for(config: Config, tenant: str) -> list[Ceiling]:
    """Every ceiling the network patterns of `tenant`'s sessions must fit under.

    The config's `network.allow_max`, and the tenant's `network_allow_max`
    when its quota sets one.
    """
    allow_max = parse_patterns(config.network.allow_max, "network.allow_max")
    ceilings = [Ceiling("network.allow_max", allow_max)]
    quota = config.quota_of(tenant)
    if quota is not None and quota.network_allow_max is not None:
        where = f"tenants.{tenant}.network_allow_max"
        ceilings.append(
            Ceiling(
                f"tenant {tenant}'s network_allow_max",
                parse_patterns(quota.network_allow_max, where),
            )
        )
    return ceilings


def proxy_env(port: int = RELAY_PORT) -> dict[str, str]:
    """What commands of a session with network see: pip, npm, git, curl and
    Python's urllib all read these."""
    url = f"http://127.0.0.1:{port}"
    env = {"HTTP_PROXY": url, "HTTPS_PROXY": url, "NO_PROXY": NO_PROXY}
    env.update({name.lower(): value for name, value in env.items()})
    return env


class Egress:
    """The proxies of every session with network, by session id."""

    def __init__(
        self,
        config: Config,
        on_event: EventSink | None = None,
        resolve: Resolver = system_resolve,
        refused: Callable[[str], None] = lambda share: None,
    ) -> None:
        self._config = config
        self.enabled = egress_enabled(config)
        if self.enabled:
            problem = socket_path_problem(config)
            if problem:
                raise ValueError(problem)
        self.on_event = on_event
        self._resolve = resolve
        self._settings = ProxySettings(
            idle_timeout_s=config.network.idle_timeout_s,
            connect_timeout_s=config.network.connect_timeout_s,
            pins=dict(config.network.hosts),
        )
        self._proxies: dict[str, SessionProxy] = {}
        # What every session's proxy shares (per tenant, daemon-wide, descriptors).
        self.shares = ConnectionShares(
            config.shares, Descriptors(config.shares.fd_reserve), refused
        )

    def listening_on(self, port: int) -> None:
        """A TCP port the daemon listens on: no proxy dials it on this host."""
        if port:
            self._settings.own_ports.add(port)

    def policy_for(self, tenant: str, request: NetworkRequest | None) -> NetworkPolicy:
        """The effective policy of a new session of `tenant` (no `allow`: none).

        A malformed pattern is BadRequest, one outside a ceiling PermissionDenied.
        """
        if request is None or not request.allow:
            return NetworkPolicy()
        try:
            patterns = parse_patterns(request.allow, "network.allow")
        except PatternError as exc:
            raise BadRequest(str(exc)) from exc
        problem = outside(patterns, ceilings_for(self._config, tenant))
        problem = problem or over_loopback_pins(patterns, self._settings.pins, "network.allow")
        if problem:
            raise PermissionDenied(problem)
        limits = self._config.network
        return NetworkPolicy(
            allow=tuple(dict.fromkeys(patterns)),
            max_bytes=clamp_cap(request.max_bytes, limits.max_bytes),
            max_connections=clamp_cap(request.max_connections, limits.max_connections),
        )

    async def open(self, session_id: str, policy: NetworkPolicy, tenant: str = "") -> None:
        """Listen for the session's relay in its relay directory."""
        proxy = SessionProxy(
            session_id, policy, self._settings, self._emit, self._resolve, tenant, self.shares
        )
        path = socket_path(self._config, session_id)
        # The backend made it when it created the container (and mounted it);
        # a backend that mounts nothing (the fake one) gets it here.
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        await proxy.start(path)
        self._proxies[session_id] = proxy
        log.info(
            "session %s: network to %s (max %d bytes, %d connections)",
            session_id,
            ", ".join(policy.allow_texts()),
            policy.max_bytes,
            policy.max_connections,
        )

    async def close(self, session_id: str) -> None:
        """Stop the session's proxy and cut its connections (idempotent)."""
        proxy = self._proxies.pop(session_id, None)
        if proxy is not None:
            await proxy.close()

    async def shutdown(self) -> None:
        """Close every proxy; the instance's socket root goes too once empty."""
        for session_id in list(self._proxies):
            await self.close(session_id)
        with contextlib.suppress(OSError):
            os.rmdir(socket_root(self._config))

    def proxy(self, session_id: str) -> SessionProxy | None:
        return self._proxies.get(session_id)

    def mark(self, session_id: str) -> int:
        """A point to report from: `report_since(session_id, mark)` after a call."""
        proxy = self._proxies.get(session_id)
        return proxy.mark() if proxy is not None else 0

    def report_since(self, session_id: str, mark: int) -> dict[str, Any]:
        """`network_denied` / `network_note` for a call's result ({} when nothing happened)."""
        proxy = self._proxies.get(session_id)
        return proxy.report_since(mark) if proxy is not None else {}

    def sweep(self, keep: Iterable[str]) -> int:
        """Remove the relay directories of sandboxes gone (a previous run's)."""
        kept = set(keep)
        gone = [sid for sid in relay_dirs(self._config) if sid not in kept]
        for session_id in gone:
            remove_relay_dir(self._config, session_id)
        return len(gone)

    def _emit(self, event: EgressEvent) -> None:
        if self.on_event is not None:
            self.on_event(event)
