"""The rules that turn a call's credentials into a principal, and the start-up check.

In order: a bearer token, when sent, names the principal (and must be
valid: a bad token is refused whatever else the call carries); else a
verified client certificate; else a unix-socket caller is `auth.unix_tenant`;
else, with no authentication configured, a loopback caller is tenant
`default`. Anything else is UNAUTHENTICATED with a message saying what was
missing or wrong — never which tokens exist.

A valid token's principal is remembered per peer (a connection's address)
until the tokens file changes, so a client's calls after its first check
no hash; the file is still checked every `TokenStore` interval, so a
revoked token is refused as soon as without the cache.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from dataclasses import dataclass, field

from runtime.auth.principals import CERTIFICATE, LOCAL, TOKEN, UNIX, Principal, certificate_tenant
from runtime.auth.tokens import PREFIX, TOKEN_LENGTH, TokenStore
from runtime.config import AuthConfig, Config
from runtime.constants import DEFAULT_TENANT
from runtime.errors import Unauthenticated

SCHEME = "bearer"
# (peer, token) pairs whose principal is remembered; the oldest go first.
CACHED_PEERS = 4096
HOW = "send metadata 'authorization: Bearer <token>' (`toolrt tokens create` makes one)"


@dataclass(frozen=True)
class Credentials:
    """What one call presents, as the transport saw it."""

    # Every value of the `authorization` metadata key.
    authorization: list[str] = field(default_factory=list)
    # gRPC's peer string: "ipv4:127.0.0.1:5555", "ipv6:[::1]:5555", "unix:...".
    peer: str = ""
    # A client certificate the TLS handshake verified: its subject, CN and URI SANs.
    cert_subject: str = ""
    cert_common_name: str = ""
    cert_uris: list[str] = field(default_factory=list)


def peer_host(peer: str) -> str:
    """The caller's address without its port ("unix" for the unix socket)."""
    kind, _, rest = peer.partition(":")
    if kind == "unix":
        return "unix"
    host = rest.rpartition(":")[0] if kind in ("ipv4", "ipv6") else rest
    return host.strip("[]") or peer


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bearer_token(values: list[str]) -> str:
    """The token of one `authorization: Bearer <token>` value; UNAUTHENTICATED if malformed."""
    if len(values) > 1:
        msg = f"{len(values)} authorization values; send exactly one: 'Bearer <token>'"
        raise Unauthenticated(msg, "malformed")
    value = values[0]
    scheme, space, token = value.partition(" ")
    if scheme.lower() != SCHEME or not space:
        # Echo a scheme only when it looks like one: a bare token must not reach the log.
        shown = f" (scheme {scheme!r})" if scheme.isalpha() and len(scheme) <= 16 else ""
        msg = f"authorization is not 'Bearer <token>'{shown}; {HOW}"
        raise Unauthenticated(msg, "malformed")
    if not token.isascii() or not token.isprintable():
        msg = "the token has characters no toolrt token has (non-ASCII or control)"
        raise Unauthenticated(msg, "malformed")
    if token != token.strip() or " " in token:
        msg = "the token has spaces in or around it; send 'Bearer <token>' with one space"
        raise Unauthenticated(msg, "malformed")
    if len(token) != TOKEN_LENGTH or not token.startswith(PREFIX):
        msg = (
            f"the token is {len(token)} characters; a toolrt token is {TOKEN_LENGTH}, "
            f"starting with {PREFIX!r}"
        )
        raise Unauthenticated(msg, "malformed")
    return token


class Authenticator:
    """Credentials → Principal, by the daemon's `auth` settings."""

    def __init__(self, auth: AuthConfig, tokens: TokenStore | None = None) -> None:
        self._auth = auth
        if tokens is None and auth.tokens_file:
            tokens = TokenStore(auth.tokens_file)
        self._tokens = tokens
        self._known: OrderedDict[tuple[str, str], Principal] = OrderedDict()
        self._known_generation = -1

    def authenticate(self, creds: Credentials) -> Principal:
        if creds.authorization:
            return self._by_token(bearer_token(creds.authorization), creds.peer)
        if creds.cert_subject:
            tenant = certificate_tenant(creds.cert_uris, creds.cert_common_name)
            return Principal(tenant, creds.cert_subject, CERTIFICATE)
        enabled = self._auth.enabled
        if creds.peer.startswith("unix:"):
            return Principal(self._auth.unix_tenant, "unix", UNIX, admin=not enabled)
        if not enabled and is_loopback(peer_host(creds.peer)):
            return Principal(DEFAULT_TENANT, "local", LOCAL, admin=True)
        msg = f"no credentials: {HOW}"
        raise Unauthenticated(msg, "missing")

    def _by_token(self, token: str, peer: str) -> Principal:
        if self._tokens is None:
            msg = "this daemon takes no tokens (auth.tokens_file is not set); send none"
            raise Unauthenticated(msg, "wrong")
        generation = self._tokens.current()
        if generation != self._known_generation:
            self._known.clear()
            self._known_generation = generation
        key = (peer, token)
        principal = self._known.get(key)
        if principal is not None:
            return principal
        record = self._tokens.lookup(token)
        if record is None:
            msg = "the token is not valid: unknown, revoked or mistyped"
            raise Unauthenticated(msg, "wrong")
        principal = Principal(record.tenant, record.id, TOKEN, admin=record.admin)
        self._known[key] = principal
        if len(self._known) > CACHED_PEERS:
            self._known.popitem(last=False)
        return principal


def startup_problem(config: Config) -> str:
    """Why the daemon must not start with `config` ("" when it may)."""
    auth = config.auth
    if bool(auth.tls_cert_file) != bool(auth.tls_key_file):
        return "TLS needs both auth.tls_cert_file and auth.tls_key_file; one of them is empty"
    if auth.tls_client_ca_file and not auth.tls_cert_file:
        return (
            "auth.tls_client_ca_file (mutual TLS) needs TLS: set auth.tls_cert_file "
            "and auth.tls_key_file"
        )
    if config.listen and not auth.enabled:
        host = config.listen.rpartition(":")[0]
        if not is_loopback(host):
            return (
                f"listen = {config.listen!r} is not a loopback address and no authentication "
                "is configured: set auth.tokens_file (bearer tokens) or auth.tls_client_ca_file "
                "(client certificates), or listen on 127.0.0.1"
            )
    return ""
