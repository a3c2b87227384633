"""Idempotency by call id: each session's memory of the calls it answered.

A call id names one call. The first time an id arrives the call runs and its
result is recorded; every repeat gets that result without running anything:

- same id, same tool and arguments (compared as parsed JSON, so whitespace,
  key order, `1.0` vs `1` and an argument sent as null vs left out do not
  matter) → the first result;
- same id, different tool or arguments → INVALID_ARGUMENTS (a new call needs
  a new id; providers give every call a fresh one);
- a repeat while the first attempt still runs waits for its result;
- the first attempt was cut off (the client cancelled the RPC, the handler
  was torn down) → OUTCOME_UNKNOWN: it may have run, so it never runs again.

Calls that never reached their tool (unknown tool, invalid arguments, budget
spent) are recorded like any other: a repeat gets the same answer, and a
corrected call needs a new id — the journal does not guess which failures
are safe to run again.

Durable (runtime/state/journal_store.py, through a `JournalSink`): a call
with side effects is recorded as running before it starts, and every result
before it is answered; a re-adopted session's journal is `restore`d from
those rows. A call that was still running when the daemon died is resumed
on its retry (`resume`: the sandbox's agent answers with the result it kept,
waiting for the call if it still runs). A call cut off by a daemon that
stops and keeps its sessions (`DaemonStopping`) is not an outcome: its
waiters get the same error, retryable, and nothing is recorded.

Memory is bounded: the most recent `max_results` results (and at most
`max_bytes` of them, ids and fingerprints counted) are kept; older ones
shrink to their id and fingerprint (`max_ids` of those, each id at most 256
bytes: longer ones are refused before they reach the journal), enough to
refuse a repeat rather than run it twice. An id older than that is
forgotten.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from runtime import cpu
from runtime.errors import DaemonStopping, InvalidArguments, OutcomeUnknown
from runtime.models import ToolCall, ToolResult
from runtime.tools.validation import Arguments, read_arguments, text_slices

_EXACT_FLOAT_INTS = 2**53


def _canonical(value: Any) -> Any:
    """JSON numbers with the same value compare equal: 1, 1.0 and 1e0."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) < _EXACT_FLOAT_INTS:
            return int(value)
        return value
    if isinstance(value, dict):
        return {key: _canonical(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    return value


def fingerprint(call: ToolCall, arguments: Arguments | None = None) -> str:
    """A digest of the tool name and the arguments as parsed JSON.

    `arguments` is the call's text already parsed (the call path parses it
    once, for this and for validation); without it the text is read here.
    """
    if arguments is None:
        arguments = read_arguments(call.arguments_json)
    digest = hashlib.sha256(f"{call.name}\x00".encode("utf-8", "surrogatepass"))
    if arguments.value is None:
        # Not JSON, or beyond what validation takes (which refuses it
        # anyway): the exact text is the call (hashed a slice at a time: it
        # may be many megabytes).
        digest.update(b"\x00raw\x00")
        for piece in text_slices(call.arguments_json):
            digest.update(piece)
    else:
        # An optional argument sent as null means absent (DESIGN.md).
        present = {k: _canonical(v) for k, v in arguments.value.items() if v is not None}
        canonical = json.dumps(present, sort_keys=True, separators=(",", ":"))
        digest.update(canonical.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


class JournalSink(Protocol):
    """Where a journal's calls are made durable (state.durable for sessions)."""

    @property
    def healthy(self) -> bool:
        """False while the latest write failed: then every call is recorded
        as started first (and refused if that fails)."""
        ...

    async def started(self, call_id: str, fingerprint: str) -> None: ...

    async def finished(self, call_id: str, fingerprint: str, result: ToolResult) -> None:
        """Never raises: a result that could not be stored is still answered
        (and the sandbox keeps it, unacknowledged, for the next daemon)."""
        ...


@dataclass
class _Entry:
    fingerprint: str
    answer: asyncio.Future[ToolResult]
    size: int = 0


def _size(call_id: str, digest: str, result: ToolResult) -> int:
    """Everything an entry holds: its id, its fingerprint and its result."""
    message = result.error.message if result.error else ""
    return len(call_id) + len(digest) + len(result.output_json) + len(message)


def _shown(call_id: str) -> str:
    return call_id if len(call_id) <= 64 else call_id[:61] + "..."


class Journal:
    """The calls of one session, by id; see the module docstring."""

    def __init__(
        self, max_results: int = 1024, max_bytes: int = 8 << 20, max_ids: int = 20_000
    ) -> None:
        self.max_results = max(1, max_results)
        self.max_bytes = max_bytes
        self.max_ids = max_ids
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._forgotten: OrderedDict[str, str] = OrderedDict()
        self._bytes = 0
        # Calls a previous daemon started and never answered: id -> fingerprint.
        self._unfinished: dict[str, str] = {}
        self.sink: JournalSink | None = None
        self._storing: set[asyncio.Future[None]] = set()

    def restore(
        self, call_id: str, fingerprint: str, result: ToolResult | None, done: bool
    ) -> None:
        """A call the state database remembers (oldest first): answered
        (`result`), answered but its result dropped (`done`, no result), or
        started and never answered."""
        if result is not None:
            future: asyncio.Future[ToolResult] = asyncio.get_running_loop().create_future()
            future.set_result(result)
            entry = _Entry(fingerprint, future, _size(call_id, fingerprint, result))
            self._entries[call_id] = entry
            self._bytes += entry.size
            self._trim()
        elif done:
            self._forgotten[call_id] = fingerprint
        else:
            self._unfinished[call_id] = fingerprint

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def kept_bytes(self) -> int:
        return self._bytes

    async def run_once(
        self,
        call: ToolCall,
        run: Callable[[], Awaitable[ToolResult]],
        resume: Callable[[], Awaitable[ToolResult]] | None = None,
        durable_start: bool = True,
        digest: str | None = None,
    ) -> ToolResult:
        """The result of `call`: from `run()` the first time, recorded after.

        `resume` replaces `run` for a call a previous daemon started and
        never answered; `durable_start=False` records no start (a read-only
        call, harmless to run again); `digest` is the call's `fingerprint`
        when the caller has it already.
        """
        if digest is None:
            digest = await cpu.compute(len(call.arguments_json), fingerprint, call)
        entry = self._entries.get(call.id)
        if entry is None:
            forgotten = self._forgotten.get(call.id)
            if forgotten is not None:
                return self._answer_forgotten(call, forgotten == digest)
            unfinished = self._unfinished.get(call.id)
            if unfinished is not None:
                if unfinished != digest:
                    return self._different_arguments(call)
                del self._unfinished[call.id]
                return await self._first(call, digest, resume or run, durable_start=False)
            return await self._first(call, digest, run, durable_start)
        if entry.fingerprint != digest:
            return self._different_arguments(call)
        # A repeat: the first attempt's answer, waiting for it if still running.
        # Shielded, so a repeat that is itself cancelled leaves the first alone.
        return await asyncio.shield(entry.answer)

    async def _first(
        self,
        call: ToolCall,
        digest: str,
        run: Callable[[], Awaitable[ToolResult]],
        durable_start: bool = True,
    ) -> ToolResult:
        entry = _Entry(digest, asyncio.get_running_loop().create_future())
        self._entries[call.id] = entry
        if self.sink is not None and (durable_start or not self.sink.healthy):
            try:
                await self.sink.started(call.id, digest)
            except BaseException as exc:
                # Not started, so nothing to remember: a retry may run it.
                del self._entries[call.id]
                if isinstance(exc, Exception):
                    entry.answer.set_exception(exc)
                    entry.answer.exception()
                else:
                    entry.answer.cancel()
                raise
        try:
            result = await run()
            if self.sink is not None:
                await self.sink.finished(call.id, digest, result)
        except DaemonStopping as exc:
            # Not an outcome: the call runs on in the sandbox, and the next
            # daemon answers its retry. Waiters now get the same retryable error.
            del self._entries[call.id]
            self._unfinished[call.id] = digest
            entry.answer.set_exception(exc)
            entry.answer.exception()
            raise
        except BaseException:
            # Cut off (cancelled RPC, shutdown): whatever it did stays unknown,
            # and repeats — those waiting now and later ones — say so.
            msg = (
                f"call {_shown(call.id)!r} was interrupted before its result was "
                "delivered; it may or may not have run, and it will not run again. "
                "Check its effects, then use a new call id if it must run."
            )
            unknown = ToolResult.failed(call.id, OutcomeUnknown(msg))
            entry.answer.set_result(unknown)
            self._trim()
            if self.sink is not None:
                # The same answer after a restart (stored off this cancelled task).
                storing = asyncio.ensure_future(self.sink.finished(call.id, digest, unknown))
                self._storing.add(storing)
                storing.add_done_callback(self._storing.discard)
            raise
        entry.answer.set_result(result)
        entry.size = _size(call.id, digest, result)
        self._bytes += entry.size
        self._trim()
        return result

    def _different_arguments(self, call: ToolCall) -> ToolResult:
        msg = (
            f"call id {_shown(call.id)!r} was already used in this session for a "
            "different tool or different arguments; a new call needs a new id"
        )
        return ToolResult.failed(call.id, InvalidArguments(msg))

    def _answer_forgotten(self, call: ToolCall, same: bool) -> ToolResult:
        if not same:
            return self._different_arguments(call)
        msg = (
            f"call {_shown(call.id)!r} already ran in this session, but its result "
            f"is no longer kept (only the latest {self.max_results} are); it was "
            "not run again"
        )
        return ToolResult.failed(call.id, OutcomeUnknown(msg))

    def _trim(self) -> None:
        """Drop the oldest finished results past the bounds; keep their ids."""
        over = len(self._entries) - self.max_results
        bytes_over = self._bytes - self.max_bytes
        if over <= 0 and bytes_over <= 0:
            return
        # The oldest first, and only as many as the bounds need: a full
        # journal drops one entry a call, so no copy of all its keys.
        dropped: list[str] = []
        for call_id, entry in self._entries.items():
            if over <= 0 and bytes_over <= 0:
                break
            if not entry.answer.done():
                continue  # still running: its waiters need it
            dropped.append(call_id)
            over -= 1
            bytes_over -= entry.size
        for call_id in dropped:
            entry = self._entries.pop(call_id)
            self._bytes -= entry.size
            if self.max_ids:
                self._forgotten[call_id] = entry.fingerprint
        while len(self._forgotten) > self.max_ids:
            self._forgotten.popitem(last=False)
