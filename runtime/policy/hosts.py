"""Host patterns, the ceilings they must fit under, and a session's network policy.

A pattern is `host[:port]`: `pypi.org`, `*.pythonhosted.org` (any name
below it, not the name itself), `*` (any name: only sensible in an
operator's ceiling), with `:443`, or `:*` for every port; no port means 80
and 443. IP addresses are never patterns: the proxy dials names it
resolved itself (names pinned in `[network.hosts]` for private mirrors).

Every pattern a session asks for must fit under each ceiling that applies
to it (`ceilings_for`): today the config's `network.allow_max`; with
tenants, also the tenant's `network_allow_max`.

Pure logic, unit-tested in tests/unit/test_egress_policy.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from runtime.policy.addresses import HostError, blocked_reason, ip_literal, normalize_host

# No port in a pattern: plain HTTP and HTTPS.
DEFAULT_PORTS = frozenset({80, 443})
ANY = "*"
SYNTAX = "host, *.domain, host:port or host:* (no scheme, path or IP address)"


class PatternError(ValueError):
    """A pattern that is not `host[:port]`; the message says what was expected."""


@dataclass(frozen=True)
class HostPattern:
    """One parsed pattern: an exact name, `*.suffix` (names below it), or `*`."""

    host: str
    # None: every port.
    ports: frozenset[int] | None = DEFAULT_PORTS

    @property
    def wildcard(self) -> bool:
        return self.host == ANY or self.host.startswith("*.")

    def __str__(self) -> str:
        if self.ports is None:
            return f"{self.host}:*"
        if self.ports == DEFAULT_PORTS:
            return self.host
        return f"{self.host}:{min(self.ports)}"

    def matches_host(self, host: str) -> bool:
        """Does this pattern name normalized `host` (on some port)?"""
        if self.host == ANY:
            return True
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host

    def _port_matches(self, port: int) -> bool:
        return self.ports is None or port in self.ports

    def matches(self, host: str, port: int) -> bool:
        """May a connection to normalized `host`:`port` use this pattern?"""
        return self.matches_host(host) and self._port_matches(port)

    def covers(self, other: HostPattern) -> bool:
        """Does every (host, port) `other` admits fit this pattern too?"""
        if self.ports is not None and (other.ports is None or not other.ports <= self.ports):
            return False
        if self.host == ANY:
            return True
        if other.host == ANY:
            return False
        if self.host.startswith("*."):
            # `*.b.c` covers `a.b.c`, `*.a.b.c` and itself, not `b.c`.
            return other.host.endswith(self.host[1:])
        return not other.wildcard and other.host == self.host


def parse_pattern(text: str) -> HostPattern:
    """`host[:port]` as a HostPattern; PatternError saying what is wrong."""
    raw = text.strip()
    if not raw:
        msg = f"an empty pattern; expected {SYNTAX}"
        raise PatternError(msg)
    if "/" in raw or "@" in raw or raw.startswith("["):
        msg = f"{text!r} is not a pattern; expected {SYNTAX}"
        raise PatternError(msg)
    if ip_literal(raw) is not None:
        msg = (
            f"{text!r} is an IP address; patterns name hosts (an operator can pin a name "
            "to an address in [network.hosts])"
        )
        raise PatternError(msg)
    host, sep, port_text = raw.rpartition(":")
    if not sep:
        host, port_text = raw, ""
    ports: frozenset[int] | None = DEFAULT_PORTS
    if sep and port_text == ANY:
        ports = None
    elif sep:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            msg = f"{text!r}: the port must be 1-65535 or *; expected {SYNTAX}"
            raise PatternError(msg)
        ports = frozenset({int(port_text)})
    host = host.strip().lower()
    if host == ANY:
        return HostPattern(ANY, ports)
    suffix = host[2:] if host.startswith("*.") else host
    try:
        name = normalize_host(suffix)
    except HostError as exc:
        msg = f"{text!r}: {exc}; expected {SYNTAX}"
        raise PatternError(msg) from exc
    return HostPattern(f"*.{name}" if host.startswith("*.") else name, ports)


def parse_patterns(texts: Iterable[str], where: str) -> tuple[HostPattern, ...]:
    """Every pattern of a list; PatternError naming `where[index]`."""
    patterns = []
    for index, text in enumerate(texts):
        try:
            patterns.append(parse_pattern(text))
        except PatternError as exc:
            msg = f"{where}[{index}]: {exc}"
            raise PatternError(msg) from exc
    return tuple(patterns)


@dataclass(frozen=True)
class Ceiling:
    """Patterns an authority lets sessions ask for, and its name for messages."""

    name: str
    patterns: tuple[HostPattern, ...]

    def admits(self, pattern: HostPattern) -> bool:
        return any(c.covers(pattern) for c in self.patterns)


def outside(patterns: Iterable[HostPattern], ceilings: Iterable[Ceiling]) -> str:
    """Why a pattern does not fit ("" when all fit every ceiling)."""
    for pattern in patterns:
        for ceiling in ceilings:
            if not ceiling.admits(pattern):
                shown = ", ".join(str(p) for p in ceiling.patterns) or "nothing"
                return (
                    f"network pattern {str(pattern)!r} is outside what {ceiling.name} allows "
                    f"({shown})"
                )
    return ""


def over_loopback_pins(patterns: Iterable[HostPattern], pins: Mapping[str, str], where: str) -> str:
    """Why a pattern reaches every port of a name pinned to a loopback (or
    unspecified) address ("" when none does): those ports are this host's,
    toolrt's own gRPC and metrics among them."""
    for index, pattern in enumerate(patterns):
        if pattern.ports is not None:
            continue
        for name, address in sorted(pins.items()):
            ip = ip_literal(address)
            local = ip is not None and blocked_reason(ip).startswith(("loopback", "unspecified"))
            if local and pattern.matches_host(name):
                return (
                    f"{where}[{index}] '{pattern}' reaches every port of {name}, which "
                    f"network.hosts pins to {address}, a loopback address where toolrt "
                    f"itself listens; name the ports instead ({name}:PORT)"
                )
    return ""


@dataclass(frozen=True)
class NetworkPolicy:
    """A session's network: the patterns it may reach and its caps (effective values)."""

    allow: tuple[HostPattern, ...] = ()
    max_bytes: int = 0
    max_connections: int = 0

    @property
    def enabled(self) -> bool:
        return bool(self.allow)

    def admits(self, host: str, port: int) -> bool:
        return any(p.matches(host, port) for p in self.allow)

    def allow_texts(self) -> list[str]:
        return [str(p) for p in self.allow]


def clamp_cap(asked: int, maximum: int) -> int:
    """A session's cap: what it asked for (0: the maximum), never above the maximum."""
    return min(asked, maximum) if asked > 0 else maximum
