"""How a session's proxied connections become `network` audit records: bounded per minute.

A sandbox can open proxy connections as fast as the daemon accepts them
(a loop of `connect(127.0.0.1:3128)`), and each ends in an EgressEvent. Per
session and minute, the first connection to each host, port and decision is
written as it ends (up to `shares.audit_network_records` of them); every
other one is counted, and when the minute is over the session's counts are
one `network` record with decision `repeated`. So a session writes at most
that many records plus one a minute, and what is counted takes memory for
at most that many keys per session.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.egress.proxy import EgressEvent

REPEATED = "repeated"
# The key of the events beyond a session's records of the minute.
OTHER = "other"


def event_key(event: EgressEvent) -> str:
    host = f"[{event.host}]" if ":" in event.host else event.host
    return f"{event.decision} {host or '?'}:{event.port}"


@dataclass
class _Minute:
    tenant: str
    written: int = 0
    count: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    # Events not written, by key: only keys written this minute, and OTHER.
    repeats: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Repeats:
    """A session's minute of events that were counted rather than written."""

    start: float
    session_id: str
    tenant: str
    count: int
    bytes_in: int
    bytes_out: int
    repeats: dict[str, int]


class NetworkCounter:
    """Which network events to write, and the counts of the others, per session and window."""

    def __init__(self, records: int, window_s: float = 60.0) -> None:
        self.records = records
        self.window_s = window_s
        self._minutes: dict[tuple[float, str], _Minute] = {}

    def add(self, event: EgressEvent, now: float) -> tuple[bool, bool]:
        """(write it now, over the session's records): a first of its key
        within the session's records is written; anything else is counted."""
        start = now - now % self.window_s
        minute = self._minutes.setdefault((start, event.session_id), _Minute(event.tenant))
        key = event_key(event)
        if key not in minute.repeats and minute.written < self.records:
            minute.written += 1
            minute.repeats[key] = 0
            return True, False
        over = key not in minute.repeats
        minute.repeats[OTHER if over else key] = minute.repeats.get(OTHER if over else key, 0) + 1
        minute.count += 1
        minute.bytes_in += event.bytes_in
        minute.bytes_out += event.bytes_out
        return False, over

    def take(self, now: float, everything: bool = False) -> list[Repeats]:
        """The counts of the windows ended before `now` (all with `everything`), removed."""
        done = [k for k in self._minutes if everything or k[0] + self.window_s <= now]
        taken = []
        for start, session_id in sorted(done):
            minute = self._minutes.pop((start, session_id))
            if minute.count:
                counted = {k: n for k, n in minute.repeats.items() if n}
                taken.append(
                    Repeats(
                        start,
                        session_id,
                        minute.tenant,
                        minute.count,
                        minute.bytes_in,
                        minute.bytes_out,
                        counted,
                    )
                )
        return taken
