"""Sessions that outlive the daemon: their journal on disk, and re-adoption.

`SessionSink` makes a session's journal durable: a call with side effects
is recorded as running before it starts, every result (with the session's
call count, last use and tools' state) before it is answered, and then the
sandbox's agent is told it may forget the result. Those acknowledgements
go in batches (ACK_CALLS calls, ACK_BYTES of output or ACK_DELAY_S, whichever
comes first), one frame for many calls: an answer the agent keeps a little
longer costs nothing but its memory, and one a daemon dies before
acknowledging is acknowledged at re-adoption, as after any crash.

`Adopter` runs once per start-up, against the records the state database
holds and the containers the engine lists for this instance:
- a container without a record (a warm one, or one whose CreateSession
  never answered) is removed;
- a record without a container is closed with reason `sandbox_lost`;
- a record with a container is re-attached in the background (a few at a
  time): same id, files, cwd and env, background processes, TTL and idle
  clocks from the stored times, the journal restored. Calls to it wait for
  that (SessionManager.lookup), new sessions do not.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from runtime.errors import StateUnavailable
from runtime.models import ToolResult
from runtime.sandbox.backend import Adopted, NotOffered, SandboxBackend
from runtime.sessions.journal import Journal
from runtime.sessions.records import session_of, tool_state_json, wall_of
from runtime.sessions.session import Session
from runtime.state.durable import Durable
from runtime.state.journal_store import DONE, RUNNING
from runtime.state.sessions import SessionRecord

log = logging.getLogger(__name__)

# Sessions re-attached at once: each is an attach, a signal and a hello.
ADOPT_CONCURRENCY = 8
# Stored results acknowledged to the agent in one frame, at the latest after
# this many calls, this many bytes of their output or this long.
ACK_CALLS = 32
ACK_BYTES = 1 << 20
ACK_DELAY_S = 1.0


class SessionSink:
    """A session's journal, written through to the state database."""

    def __init__(self, durable: Durable, session: Session) -> None:
        self._durable = durable
        self._session = session
        # Stored results the agent has not been told of yet, and their output's size.
        self._unacked: list[str] = []
        self._unacked_bytes = 0
        self._ack_timer: asyncio.TimerHandle | None = None
        self._acking: set[asyncio.Future[None]] = set()

    @property
    def healthy(self) -> bool:
        return not self._durable.broken

    async def started(self, call_id: str, fingerprint: str) -> None:
        await self._durable.call_started(self._session.id, call_id, fingerprint)

    async def finished(self, call_id: str, fingerprint: str, result: ToolResult) -> None:
        session = self._session
        touch = (session.calls, wall_of(time.monotonic()), tool_state_json(session))
        try:
            await self._durable.call_finished(session.id, call_id, fingerprint, result, touch)
        except StateUnavailable:
            # Answered anyway; the agent keeps it unacknowledged for the next daemon.
            return
        self._unacked.append(call_id)
        self._unacked_bytes += result.output_bytes
        if len(self._unacked) >= ACK_CALLS or self._unacked_bytes >= ACK_BYTES:
            await self._ack()
        elif self._ack_timer is None:
            loop = asyncio.get_running_loop()
            self._ack_timer = loop.call_later(ACK_DELAY_S, self._ack_later)

    def _ack_later(self) -> None:
        self._ack_timer = None
        task = asyncio.ensure_future(self._ack())
        self._acking.add(task)
        task.add_done_callback(self._acking.discard)

    async def _ack(self) -> None:
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        call_ids, self._unacked, self._unacked_bytes = self._unacked, [], 0
        if call_ids:
            await self._session.sandbox.agent.ack(call_ids)


def new_journal(factory: Callable[[], Journal], durable: Durable, session: Session) -> Journal:
    journal = factory()
    journal.sink = SessionSink(durable, session)
    return journal


class Adopter:
    """Re-attaches the sessions of a previous run; see the module docstring."""

    def __init__(
        self,
        durable: Durable,
        backend: SandboxBackend,
        journal_factory: Callable[[], Journal],
        secrets: dict[str, str],
        adopted: Callable[[Session], Awaitable[None]],
        lost: Callable[[SessionRecord, str], Awaitable[None]],
    ) -> None:
        self._durable = durable
        self._backend = backend
        self._journal_factory = journal_factory
        self._secrets = secrets
        self._adopted = adopted
        self._lost = lost
        self._limit = asyncio.Semaphore(ADOPT_CONCURRENCY)

    async def adopt(self, record: SessionRecord) -> None:
        """Re-attach one session; on any failure, close it as lost."""
        async with self._limit:
            started = time.monotonic()
            try:
                adopted = await self._backend.adopt(record.id)
            except NotOffered as exc:
                await self._lost(record, str(exc))
                return
            except Exception as exc:  # noqa: BLE001 - any failure loses that session only
                await self._lost(record, f"its sandbox could not be re-attached: {exc}")
                return
            try:
                session = await self._restore(record, adopted)
                await self._adopted(session)
            except Exception as exc:  # noqa: BLE001
                log.exception("re-adopting session %s failed", record.id)
                await self._lost(record, f"it could not be restored: {exc}")
                return
            log.info(
                "session %s re-adopted in %.0f ms (%d call(s) still running, %d result(s) "
                "unacknowledged)",
                record.id,
                (time.monotonic() - started) * 1000,
                len(adopted.hello.running),
                len(adopted.hello.unacked),
                extra={"session_id": record.id},
            )

    async def _restore(self, record: SessionRecord, adopted: Adopted) -> Session:
        journal = self._journal_factory()
        rows = await self._durable.journal_rows(record.id)
        for row in rows:
            journal.restore(row.call_id, row.fingerprint, row.result, row.status != RUNNING)
        session = session_of(record, adopted.sandbox, journal, self._secrets)
        journal.sink = SessionSink(self._durable, session)
        # Results the agent kept that the journal has stored: it may drop them.
        stored = {row.call_id for row in rows if row.status == DONE}
        done = [call_id for call_id in adopted.hello.unacked if call_id in stored]
        if done:
            await adopted.sandbox.agent.ack(done)
        return session
