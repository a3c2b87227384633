"""The audit log: one JSON object a line for every session event, call, transfer and refusal.

Each record is in the kernel before the RPC answers (`O_APPEND`, no
user-space buffer). Calls' records are written in groups (`record_calls`):
the records of every call that finishes in the same turn of the event loop
go in one `write(2)`, after which each of those calls answers. On the loop,
not a thread: a hop to a writer thread and back cost about 60 µs of CPU a
call, three times the encoding and the write it would move, and under the
GIL a thread encodes no faster. When a write fails (a full
disk, a file made unwritable) the record is kept in memory, the daemon says
so in its log, and every RPC that would need a record is refused with
UNAVAILABLE until the kept records can be written: nothing is dropped
silently. The file is reopened when it is moved away (log rotation).

Refused authentications are counted per peer and minute and written as one
`auth.denied` record with a count, so a flood of bad tokens costs a line a
minute per peer; a session's proxied connections are written as they end up
to `shares.audit_network_records` a minute, the first of each host, port and
decision, and the rest counted into one `network` record (`network_audit.py`).
What waits in memory for a broken log is bounded in bytes
(`shares.audit_pending_bytes`). Records carry `args_sha256` and sizes, never
arguments, outputs or tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from runtime.auth.principals import Principal
from runtime.egress.proxy import EgressEvent
from runtime.errors import AuditUnavailable, RequestError
from runtime.models import ToolCall, ToolResult
from runtime.network_audit import REPEATED, NetworkCounter

log = logging.getLogger(__name__)

# How often a broken log is tried again (each refused RPC would try otherwise).
RETRY_INTERVAL_S = 1.0
# Bytes of records kept while the log cannot be written (shares.audit_pending_bytes);
# beyond, the oldest are lost (and logged).
PENDING_BYTES = 16 << 20
# Network records of one session per minute (shares.audit_network_records).
NETWORK_RECORDS = 60
# `toolrt_share_refusals_total{share}`: network events beyond a session's records.
SHARE_AUDIT_NETWORK = "audit_network_records"
# Distinct peers counted per window; the rest are counted under "other".
MAX_PEERS = 10_000
DAEMON = Principal(tenant="", name="", kind="daemon")


def timestamp(unix: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(unix)) + f".{int(unix % 1 * 1000):03d}Z"


def record(event: str, who: Principal, ts: float, **fields: Any) -> dict[str, Any]:
    """Every field DESIGN lists, in one order, empty where it does not apply."""
    data: dict[str, Any] = {
        "ts": timestamp(ts),
        "event": event,
        "tenant": who.tenant,
        "principal": who.name,
        "session_id": "",
        "call_id": "",
        "tool": "",
        "code": "",
        "duration_ms": 0,
        "args_sha256": "",
        "args_bytes": 0,
        "output_bytes": 0,
        "exit_code": None,
    }
    data.update(fields)
    return data


def call_fields(call: ToolCall) -> dict[str, Any]:
    """What identifies a call's arguments without them: hash and size of the text received."""
    raw = call.arguments_json.encode("utf-8", "surrogatepass")
    return {
        "call_id": call.id[:256],
        "tool": call.name[:128],
        "args_sha256": hashlib.sha256(raw).hexdigest(),
        "args_bytes": len(raw),
    }


class DenialCounter:
    """Refused authentications per (peer, window): counted, logged once, reported when done."""

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._counts: dict[tuple[float, str], dict[str, int]] = {}

    def add(self, peer: str, reason: str, message: str, now: float) -> None:
        start = now - now % self.window_s
        key = (start, peer)
        if key not in self._counts:
            if sum(1 for w, _ in self._counts if w == start) >= MAX_PEERS:
                key = (start, "other")
            else:
                log.warning(
                    "refused authentication from %s: %s (more from it until %s are counted)",
                    peer,
                    message,
                    timestamp(start + self.window_s),
                )
        reasons = self._counts.setdefault(key, {})
        reasons[reason] = reasons.get(reason, 0) + 1

    def take(self, now: float, everything: bool = False) -> list[tuple[float, str, dict[str, int]]]:
        """The windows that ended before `now` (all of them with `everything`), removed."""
        done = [k for k in self._counts if everything or k[0] + self.window_s <= now]
        return [(start, peer, self._counts.pop((start, peer))) for start, peer in sorted(done)]


class AuditLog:
    """Appends records to `path` ("" = no audit log: records go nowhere, refusals are logged)."""

    def __init__(
        self,
        path: str,
        window_s: float = 60.0,
        clock: Callable[[], float] = time.time,
        network_records: int = NETWORK_RECORDS,
        pending_bytes: int = PENDING_BYTES,
        refused: Callable[[str], None] = lambda share: None,
    ) -> None:
        self.path = path
        self.denials = DenialCounter(window_s)
        self.connections = NetworkCounter(network_records, window_s)
        self._clock = clock
        self._refused = refused
        self._fd: int | None = None
        self._inode: tuple[int, int] | None = None
        self._pending: deque[bytes] = deque()
        self._pending_bytes = 0
        self._max_pending_bytes = pending_bytes
        self._broken = ""
        self._retry_at = 0.0
        # Calls' records waiting for this turn of the loop's write, and its outcome.
        self._group: list[dict[str, Any]] = []
        self._group_written: asyncio.Future[None] | None = None

    # -- writing --------------------------------------------------------------
    def _open(self) -> int:
        try:
            st = os.stat(self.path)
            inode: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            inode = None
        if self._fd is not None and inode == self._inode:
            return self._fd
        self._close_fd()
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        st = os.fstat(fd)
        self._fd, self._inode = fd, (st.st_dev, st.st_ino)
        # A line cut short by an earlier failure must not swallow the next record.
        if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
            os.write(fd, b"\n")
        return fd

    def _close_fd(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = self._inode = None

    def _flush_pending(self) -> None:
        """Every waiting line in one write; those written whole leave the queue."""
        fd = self._open()
        if not self._pending:
            return
        data = b"".join(self._pending)
        written = os.write(fd, data)
        left = written
        while self._pending and len(self._pending[0]) <= left:
            left -= len(self._pending[0])
            self._pending_bytes -= len(self._pending.popleft())
        if written != len(data):
            msg = f"short write ({written} of {len(data)} bytes)"
            raise OSError(msg)

    def _append(self, lines: list[bytes]) -> None:
        self._pending += lines
        self._pending_bytes += sum(map(len, lines))
        lost = 0
        while self._pending_bytes > self._max_pending_bytes:
            self._pending_bytes -= len(self._pending.popleft())
            lost += 1
        if lost:
            log.error(
                "audit log %s: %d record(s) lost while it could not be written "
                "(shares.audit_pending_bytes)",
                self.path,
                lost,
            )
        try:
            self._flush_pending()
        except OSError as exc:
            self._close_fd()
            if not self._broken:
                log.error(
                    "audit log %s cannot be written (%s): refusing calls until it can",
                    self.path,
                    exc,
                )
            self._broken = exc.strerror or str(exc)
            self._retry_at = self._clock() + RETRY_INTERVAL_S
            raise AuditUnavailable(self._unavailable()) from exc
        if self._broken:
            log.warning("audit log %s is writable again: serving calls", self.path)
            self._broken = ""

    def _unavailable(self) -> str:
        return (
            f"the audit log {self.path} cannot be written ({self._broken}); toolrt refuses "
            f"calls until it can ({len(self._pending)} record(s) waiting)"
        )

    def write(self, records: Iterable[dict[str, Any]]) -> None:
        """Append `records`, in the kernel on return; AuditUnavailable when they are not."""
        if not self.path:
            return
        lines = [
            json.dumps(r, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")
            + b"\n"
            for r in records
        ]
        if lines:
            self._append(lines)

    def check(self) -> None:
        """UNAVAILABLE while kept records cannot be written (tried at most once a second)."""
        if not self._broken:
            return
        if self._clock() < self._retry_at:
            raise AuditUnavailable(self._unavailable())
        self._append([])

    def close(self) -> None:
        """Write what was counted so far, then close the file."""
        with contextlib.suppress(AuditUnavailable):
            self.flush_counts(everything=True)
        if self._pending:
            log.error("audit log %s: %d record(s) never written", self.path, len(self._pending))
        self._close_fd()

    # -- events ---------------------------------------------------------------
    def denied(self, peer: str, reason: str, message: str) -> None:
        """Count a refused authentication (written once its minute is over)."""
        self.denials.add(peer, reason, message, self._clock())

    def flush_denials(self, everything: bool = False) -> None:
        now = self._clock()
        self.write(
            record(
                "auth.denied",
                DAEMON,
                start,
                peer=peer,
                count=sum(reasons.values()),
                reasons=reasons,
                window_s=self.denials.window_s,
            )
            for start, peer, reasons in self.denials.take(now, everything)
        )

    def flush_counts(self, everything: bool = False) -> None:
        """Write the counts of the windows that ended: refusals, network repeats."""
        self.flush_denials(everything)
        now = self._clock()
        self.write(
            record(
                "network",
                DAEMON,
                minute.start,
                tenant=minute.tenant,
                session_id=minute.session_id,
                decision=REPEATED,
                count=minute.count,
                repeats=minute.repeats,
                bytes_in=minute.bytes_in,
                bytes_out=minute.bytes_out,
                window_s=self.connections.window_s,
            )
            for minute in self.connections.take(now, everything)
        )

    def session(self, event: str, who: Principal, session_id: str, **fields: Any) -> None:
        """`session.create` or `session.close`."""
        tenant = fields.pop("tenant", who.tenant)
        self.write(
            [record(event, who, self._clock(), tenant=tenant, session_id=session_id, **fields)]
        )

    def calls(
        self, who: Principal, session_id: str, calls: list[ToolCall], results: list[ToolResult]
    ) -> None:
        """One `call` record per call, with its result's code, duration and sizes."""
        self.write(self._call_records(who, session_id, calls, results))

    async def record_calls(
        self, who: Principal, session_id: str, calls: list[ToolCall], results: list[ToolResult]
    ) -> None:
        """`calls`, written with the records of every call finishing in this
        turn of the loop; returns once they are in the kernel (AuditUnavailable
        when they are not)."""
        if not self.path:
            return
        self._group += self._call_records(who, session_id, calls, results)
        written = self._group_written
        if written is None:
            loop = asyncio.get_running_loop()
            written = self._group_written = loop.create_future()
            loop.call_soon(self._write_group)
        await asyncio.shield(written)

    def _write_group(self) -> None:
        records, self._group = self._group, []
        written, self._group_written = self._group_written, None
        if written is None:
            return
        try:
            self.write(records)
        except AuditUnavailable as exc:
            written.set_exception(exc)
            written.exception()  # retrieved, even if every caller has gone
        else:
            written.set_result(None)

    def _call_records(
        self, who: Principal, session_id: str, calls: list[ToolCall], results: list[ToolResult]
    ) -> list[dict[str, Any]]:
        now = self._clock()
        return [
            record(
                "call",
                who,
                now,
                session_id=session_id,
                code=result.error.code if result.error else "",
                duration_ms=result.duration_ms,
                output_bytes=result.output_bytes,
                exit_code=result.output.get("exit_code"),
                **call_fields(call),
            )
            for call, result in zip(calls, results, strict=True)
        ]

    def network(self, event: EgressEvent) -> None:
        """A `network` record for a proxied connection as it ended, or a count
        of it for the record of its session's minute (`network_audit.py`)."""
        write_now, over = self.connections.add(event, self._clock())
        if over:
            self._refused(SHARE_AUDIT_NETWORK)
        if not write_now:
            return
        self.write(
            [
                record(
                    "network",
                    DAEMON,
                    self._clock(),
                    tenant=event.tenant,
                    session_id=event.session_id,
                    host=event.host,
                    port=event.port,
                    decision=event.decision,
                    bytes_in=event.bytes_in,
                    bytes_out=event.bytes_out,
                )
            ]
        )

    def transfer(
        self, event: str, who: Principal, session_id: str, started: float, **fields: Any
    ) -> None:
        """`upload` or `download`: files and bytes moved, and how long it took."""
        duration = int((time.monotonic() - started) * 1000)
        self.write(
            [
                record(
                    event, who, self._clock(), session_id=session_id, duration_ms=duration, **fields
                )
            ]
        )

    @contextlib.contextmanager
    def guard(
        self,
        event: str,
        who: Principal,
        session_id: str,
        calls: list[ToolCall] | None = None,
        **extra: Any,
    ) -> Iterator[None]:
        """Refuse (UNAVAILABLE) while the log is broken; record an RPC refused
        with a status (and `extra`'s fields, e.g. the user a program asked for)."""
        self.check()
        started = time.monotonic()
        try:
            yield
        except RequestError as exc:
            now, status = self._clock(), exc.status.name
            duration = int((time.monotonic() - started) * 1000)
            common = {"session_id": session_id, "code": status, "rpc_status": status, **extra}
            each = [call_fields(call) for call in calls] if calls else [{}]
            self.write(
                record(event, who, now, duration_ms=duration, **common, **fields) for fields in each
            )
            raise
