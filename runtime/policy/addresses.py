"""Which host names are really IP addresses, and which addresses are never dialled.

The SSRF and DNS-rebinding defence of the egress proxy: a session names
hosts, never addresses, and the proxy connects only to addresses that
are globally routable (unless the operator pinned the name). Clients and
resolvers accept many spellings of one IPv4 address (`2130706433`,
`0x7f.1`, `017700000001`, `127.1`), and IPv6 can carry IPv4 inside
(`::ffff:127.0.0.1`, 6to4, NAT64): each is recognised here, so that no
spelling reaches a resolver that would read it as an address.

Pure logic, unit-tested in tests/unit/test_egress_policy.py.
"""

from __future__ import annotations

import ipaddress
import re

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# One label of a host name (letters, digits, hyphens; underscores occur in
# real names, e.g. _dmarc, and harm nothing here).
_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
_NUMERIC = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)$")
_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")


class HostError(ValueError):
    """Not a host name (nor an address) the proxy can work with."""


def _ipv4_part(text: str) -> int | None:
    """One part of a loose IPv4 spelling: decimal, 0x hex or 0-prefixed octal."""
    try:
        if text.startswith("0x"):
            return int(text[2:] or "0", 16)
        if len(text) > 1 and text.startswith("0"):
            return int(text, 8)
        return int(text, 10)
    except ValueError:
        return None


def loose_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address `host` spells the way inet_aton and browsers read it.

    One to four parts; each decimal, hex (0x) or octal (leading 0); the last
    fills the remaining bytes: `127.1`, `2130706433`, `0x7f000001`.
    """
    parts = host.split(".")
    if parts and parts[-1] == "":
        parts = parts[:-1]  # a trailing dot changes nothing
    if not 1 <= len(parts) <= 4:
        return None
    values = [_ipv4_part(p) for p in parts]
    if any(v is None for v in values):
        return None
    numbers = [v for v in values if v is not None]
    *head, last = numbers
    if any(v > 255 for v in head) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for index, part in enumerate(head):
        value += part << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def ip_literal(host: str) -> IPAddress | None:
    """The address `host` spells (any IPv4 or IPv6 form, brackets optional), or None."""
    text = host.strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text.split("%", 1)[0])
        except ValueError:
            return None
    return loose_ipv4(text)


def looks_numeric(host: str) -> bool:
    """Does the last label read as a number? Browsers then parse the whole
    name as IPv4 (and fail); no real top-level domain is numeric."""
    labels = [label for label in host.lower().split(".") if label]
    return bool(labels) and bool(_NUMERIC.match(labels[-1]))


def normalize_host(host: str) -> str:
    """`host` lower-cased without a trailing dot; HostError if it is no host name.

    IP addresses (any spelling) and numeric last labels are refused here:
    callers check `ip_literal` first when they want to say so precisely.
    """
    name = host.strip().lower()
    if name.endswith("."):
        name = name[:-1]
    if not name:
        msg = "an empty host name"
        raise HostError(msg)
    if len(name) > 253:
        msg = f"a host name of {len(name)} characters (at most 253)"
        raise HostError(msg)
    if ip_literal(name) is not None or looks_numeric(name):
        msg = f"{host!r} is an IP address, not a host name"
        raise HostError(msg)
    for label in name.split("."):
        if not _LABEL.match(label):
            msg = (
                f"{host!r} is not a host name (labels of letters, digits and hyphens, "
                "ASCII only: write internationalised names in their xn-- form)"
            )
            raise HostError(msg)
    return name


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    # IPv4-compatible (::a.b.c.d, deprecated but still parsed by some stacks).
    if int(ip) >> 32 == 0 and int(ip) > 1:
        return ipaddress.IPv4Address(int(ip))
    return None


def blocked_reason(ip: IPAddress) -> str:
    """Why the proxy never connects to `ip` ("" when it may: a global unicast address)."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_ipv4(ip)
        if inner is not None:
            reason = blocked_reason(inner)
            return f"{reason} (IPv4 inside IPv6)" if reason else ""
        if ip in _NAT64_LOCAL:
            return "private (local-use NAT64)"
    checks = (
        (ip.is_unspecified, "unspecified"),
        (ip.is_loopback, "loopback"),
        (ip.is_link_local, "link-local"),
        (ip.is_multicast, "multicast"),
        (isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT, "shared (CGNAT)"),
        (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local, "site-local"),
        (ip.is_private, "private"),
        (ip.is_reserved, "reserved"),
        (not ip.is_global, "not globally routable"),
    )
    for hit, reason in checks:
        if hit:
            return reason
    return ""
