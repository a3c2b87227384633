"""Proxy connections every session's proxy shares: per tenant, daemon-wide, within the descriptors.

A session's own cap (`network.max_connections`) bounds one session; these
bound the sum. A tenant's sessions together hold at most
`shares.proxy_connections_per_tenant`, all sessions at most
`shares.proxy_connections`, and none is admitted while fewer than
`shares.fd_reserve` descriptors would stay free (each admitted connection
takes two: the sandbox's and the upstream's). A refused connection is
answered and closed at once.
"""

from __future__ import annotations

from collections.abc import Callable

from runtime.config import SharesConfig
from runtime.descriptors import Descriptors

# A connection to the sandbox and one upstream.
DESCRIPTORS_EACH = 2


class ConnectionShares:
    def __init__(
        self,
        shares: SharesConfig,
        descriptors: Descriptors,
        refused: Callable[[str], None] = lambda share: None,
    ) -> None:
        self._shares = shares
        self._descriptors = descriptors
        self._refused = refused
        self._open: dict[str, int] = {}
        self.total = 0

    def open_of(self, tenant: str) -> int:
        return self._open.get(tenant, 0)

    def admit(self, tenant: str) -> tuple[int, str]:
        """(0, "") with the connection counted, or the HTTP status and the
        text of a refusal; `release` gives an admitted one back."""
        share = self._shares.proxy_connections_per_tenant
        if self.open_of(tenant) >= share:
            return self._refuse(
                "proxy_connections_per_tenant",
                429,
                f"this tenant's sessions already hold {share} proxy connections, its share of "
                "the daemon's (shares.proxy_connections_per_tenant); more are refused until "
                "some close",
            )
        if self.total >= self._shares.proxy_connections:
            return self._refuse(
                "proxy_connections",
                503,
                f"the daemon holds the {self._shares.proxy_connections} proxy connections it "
                "allows at once (shares.proxy_connections); retry shortly",
            )
        if self._descriptors.free() < DESCRIPTORS_EACH:
            return self._refuse(
                "fd_reserve",
                503,
                "the daemon is short of file descriptors and keeps the rest for its own work "
                "(shares.fd_reserve); retry shortly",
            )
        self._descriptors.spend(DESCRIPTORS_EACH)
        self._open[tenant] = self.open_of(tenant) + 1
        self.total += 1
        return 0, ""

    def release(self, tenant: str) -> None:
        self.total -= 1
        self._open[tenant] -= 1
        if not self._open[tenant]:
            del self._open[tenant]

    def _refuse(self, key: str, status: int, text: str) -> tuple[int, str]:
        self._refused(key)
        return status, text
