"""Execs running at once: a share per session and per tenant, refused past it.

Each running exec holds a process tree in its sandbox and, in the daemon,
an agent stream with its windows of stdin and output: a client that starts
execs and never ends them would hold these without bound (execs take no
session lock and need not spend time to stay open). So one session runs at
most `shares.execs_per_session` at once and one tenant, across its
sessions, at most `shares.execs_per_tenant`. One more is refused at once
(RESOURCE_EXHAUSTED naming the key, counted in
`toolrt_share_refusals_total{share}`), never queued: a harness that wants
more waits for one of its own to end; the other tenants are not affected.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator

from runtime.config import SharesConfig
from runtime.errors import ShareExhausted

# `toolrt_share_refusals_total{share}` labels: the keys refusing.
SHARE_EXECS_PER_SESSION = "execs_per_session"
SHARE_EXECS_PER_TENANT = "execs_per_tenant"


class RunningExecs:
    def __init__(
        self, shares: SharesConfig, refused: Callable[[str], None] = lambda share: None
    ) -> None:
        self._shares = shares
        self._refused = refused
        self._by_session: Counter[tuple[str, str]] = Counter()
        self._by_tenant: Counter[str] = Counter()

    def running(self, tenant: str, session_id: str | None = None) -> int:
        """Execs running in the tenant's session, or in all its sessions."""
        if session_id is None:
            return self._by_tenant[tenant]
        return self._by_session[(tenant, session_id)]

    @contextlib.contextmanager
    def hold(self, tenant: str, session_id: str) -> Iterator[None]:
        """Count one exec of the session while it runs, or ShareExhausted."""
        session = (tenant, session_id)
        if self._by_session[session] >= self._shares.execs_per_session:
            raise self._refusal(
                SHARE_EXECS_PER_SESSION,
                f"this session already runs {self._shares.execs_per_session} execs",
            )
        if self._by_tenant[tenant] >= self._shares.execs_per_tenant:
            raise self._refusal(
                SHARE_EXECS_PER_TENANT,
                f"tenant {tenant} already runs {self._shares.execs_per_tenant} execs "
                "across its sessions",
            )
        self._by_session[session] += 1
        self._by_tenant[tenant] += 1
        try:
            yield
        finally:
            self._by_session[session] -= 1
            self._by_tenant[tenant] -= 1
            # Counter keeps zero entries: dropping them leaves nothing of a
            # closed session (or a gone tenant) behind.
            self._by_session += Counter()
            self._by_tenant += Counter()

    def _refusal(self, share: str, held: str) -> ShareExhausted:
        self._refused(share)
        msg = f"{held}, the most it may run at once (shares.{share}); retry when one of them ends"
        return ShareExhausted(msg, share)
