"""The per-call path: budget, validation, journal, write lock, exactly one ToolResult.

A call runs in an open session of its tenant. Its id is looked up in the
session's journal (a repeat gets the first answer), then the tool's
arguments are validated, the session's call budget is spent, a tool with
side effects takes the session's write lock, and every outcome — success,
tool failure, unexpected error — becomes one ToolResult. A batch (one model
turn) runs its read-only calls together and every other call alone, in order.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from runtime.agent.redact import Redactor
from runtime.config import Config
from runtime.descriptors import EXHAUSTION, out_of_descriptors
from runtime.errors import (
    BadRequest,
    BudgetExhausted,
    DaemonStopping,
    InternalFailure,
    InvalidArguments,
    LimitExceeded,
    OutcomeUnknown,
    SandboxLost,
    SessionNotFound,
    SessionUnusable,
    ToolFailure,
    UnknownTool,
)
from runtime.models import ToolCall, ToolResult
from runtime.observability import Observability
from runtime.sessions.arguments import ArgumentReader
from runtime.sessions.fairness import FairStarts
from runtime.sessions.manager import SessionManager
from runtime.sessions.session import Session
from runtime.sessions.shares import Share
from runtime.tools.base import Baseline, Tool, ToolContext
from runtime.tools.output import fit_output, redacted, redacted_chunks, without_surrogates
from runtime.tools.registry import Registry
from runtime.tools.validation import Arguments

log = logging.getLogger(__name__)


class Baselines(Protocol):
    async def baseline(self, session: Session, since: str) -> Baseline: ...


# DESIGN: a call id is 1-256 bytes of UTF-8.
MAX_CALL_ID_BYTES = 256


class Calls:
    """Tool calls in the sessions of `manager`, with the tools of `registry`."""

    def __init__(
        self,
        config: Config,
        manager: SessionManager,
        registry: Registry,
        obs: Observability,
        baselines: Baselines | None = None,
    ) -> None:
        self._config = config
        self._manager = manager
        self._registry = registry
        self._obs = obs
        # workspace_diff's other side (the snapshots of `snapshots.service`).
        self._baselines = baselines
        slots = config.fair_start_slots or (os.cpu_count() or 1) // 2
        self.starts = FairStarts(slots, config.fair_start_slice_s)
        # Calls that read the workspace into the daemon (workspace_diff).
        self._workspace_reads = Share(config.shares.workspace_diffs_per_session)
        self._workspace_reads_by_tenant = Share(config.shares.workspace_diffs_per_tenant)
        self.arguments = ArgumentReader(
            registry,
            config.max_argument_bytes,
            config.shares.large_arguments_waiting,
            obs.metrics.share_refused,
        )

    async def execute(
        self,
        tenant: str,
        session_id: str,
        call: ToolCall,
        on_output: Callable[[str, bytes], None] | None = None,
    ) -> ToolResult:
        """Exactly one result per call id: repeats are answered by the journal."""
        return await self._execute(tenant, session_id, call, on_output, spend=1)

    async def _execute(
        self,
        tenant: str,
        session_id: str,
        call: ToolCall,
        on_output: Callable[[str, bytes], None] | None,
        spend: int,
    ) -> ToolResult:
        """`execute`, spending `spend` of the tenant's call rate (a batch spends up front)."""
        if not call.id:
            msg = "ToolCall.id must not be empty: results are tied to it"
            raise BadRequest(msg)
        try:
            session = await self._manager.lookup(tenant, session_id)
        except SessionUnusable as exc:
            return ToolResult.failed(call.id, SandboxLost(str(exc)))
        if spend:
            await self._manager.quotas.take_calls(tenant, spend)
            # A call held for its tenant's rate: the session may have closed meanwhile.
            session = self._manager.get(tenant, session_id)
        size = len(call.id.encode())
        if size > MAX_CALL_ID_BYTES:
            # Answered, never journaled: an id is what the journal keeps.
            msg = f"the call id is {size} bytes; a call id is 1 to {MAX_CALL_ID_BYTES} bytes"
            return ToolResult.failed(call.id, InvalidArguments(msg))
        with session.in_use():
            # Parsed once: the journal's fingerprint and validation share it.
            arguments, digest = await self.arguments.read(tenant, call)
            async with self.starts.turn(tenant):
                return await session.journal.run_once(
                    call,
                    lambda: self._execute_once(session, call, arguments, on_output),
                    resume=lambda: self._execute_once(
                        session, call, arguments, on_output, resume=True
                    ),
                    durable_start=self._needs_start_record(call.name),
                    digest=digest,
                )

    async def _execute_once(
        self,
        session: Session,
        call: ToolCall,
        arguments: Arguments,
        on_output: Callable[[str, bytes], None] | None = None,
        resume: bool = False,
    ) -> ToolResult:
        with self._obs.call(session.id, session.tenant, call.id, call.name) as outcome:
            result = await self._answer(session, call, arguments, on_output, resume)
            outcome.code = result.error.code if result.error else ""
        return result

    async def _answer(
        self,
        session: Session,
        call: ToolCall,
        arguments: Arguments,
        on_output: Callable[[str, bytes], None] | None,
        resume: bool = False,
    ) -> ToolResult:
        started = time.monotonic()
        # Hosts the proxy refuses during the call are listed in its result.
        egress, mark = self._manager.egress, self._manager.egress.mark(session.id)
        try:
            with redacted_chunks(session.redactor, on_output) as chunks:
                output = await self._run(session, call, arguments, chunks, resume)
            output.update(egress.report_since(session.id, mark))
            result = ToolResult(call.id, self._deliverable(output, session.redactor))
        except ToolFailure as failure:
            message, _ = without_surrogates(failure.message)
            failure.message = redacted(message, session.redactor)
            if isinstance(failure, SandboxLost):
                self._lose(session, failure.message)
            failure.output.update(egress.report_since(session.id, mark))
            failure.output = self._deliverable(failure.output, session.redactor)
            result = ToolResult.failed(call.id, failure)
        except DaemonStopping:
            raise  # not an outcome: the next daemon answers the retry
        except Exception as exc:
            result = ToolResult.failed(call.id, self._unexpected(session, call, exc))
        duration = int((time.monotonic() - started) * 1000)
        result = ToolResult(result.call_id, result.output, result.error, duration)
        log.info(
            "call session=%s id=%s tool=%s ok=%s%s ms=%d",
            session.id,
            call.id[:64],
            call.name[:64],
            result.ok,
            f" code={result.error.code}" if result.error else "",
            duration,
        )
        return result

    @staticmethod
    def _unexpected(session: Session, call: ToolCall, exc: Exception) -> ToolFailure:
        if out_of_descriptors(exc):
            # Exhaustion, not a bug: a limit the model can wait out, logged once a minute.
            EXHAUSTION.note("a tool call", exc)
            msg = "the daemon is out of file descriptors for the moment; retry shortly"
            return LimitExceeded(msg)
        correlation = uuid.uuid4().hex[:12]
        log.error(
            "call %s in session %s failed [%s]", call.id, session.id, correlation, exc_info=exc
        )
        return InternalFailure(f"internal error; correlation id {correlation}")

    def _deliverable(self, output: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
        """`output` as it can be sent: valid Unicode (text from the sandbox
        that was not UTF-8 gets U+FFFD), without the session's secrets, and
        within the result cap, so every call gets a result that encodes.

        This is where the result leaves for the journal, the client, the
        audit and the logs: every string in it is redacted here (names, link
        targets, paths, notes, messages), whatever tool built it."""
        output, replaced = without_surrogates(output)
        if replaced:
            output["invalid_utf8_replaced"] = True
        output = redacted(output, redactor)
        fitted = fit_output(output, self._config.result_cap_bytes)
        # A cut out of the middle may join the two halves of a secret.
        return output if fitted is output else redacted(fitted, redactor)

    def _lose(self, session: Session, reason: str) -> None:
        """The sandbox died under a call: close the session in the background.

        The call's result does not wait for the container's removal.
        """
        task = asyncio.ensure_future(self._manager.lose(session, reason))
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def _run(
        self,
        session: Session,
        call: ToolCall,
        arguments: Arguments,
        on_output: Callable[[str, bytes], None] | None,
        resume: bool = False,
    ) -> dict[str, Any]:
        if resume:
            # Counted and checked against the budget when it first arrived.
            return await self._resume(session, call, arguments, on_output)
        # Every call the journal keeps counts, refused ones too: the budget
        # bounds what a session may make the daemon remember.
        if session.calls >= session.limits.max_calls:
            msg = (
                f"this session has used all of its {session.limits.max_calls} tool calls; "
                "start a new session"
            )
            raise BudgetExhausted(msg)
        session.calls += 1
        session.last_tool = call.name[:64]
        tool, args = await self.arguments.validate(session.tenant, call.name, arguments)
        return await self._run_tool(session, call, tool, args, on_output)

    async def _resume(
        self,
        session: Session,
        call: ToolCall,
        arguments: Arguments,
        on_output: Callable[[str, bytes], None] | None,
    ) -> dict[str, Any]:
        """A call a previous daemon started and never answered: the sandbox's
        agent answers a command it kept (or runs one it never got); any other
        side effect may or may not have happened."""
        tool, args = await self.arguments.validate(session.tenant, call.name, arguments)
        if not (tool.read_only or tool.resumable):
            msg = (
                f"call {call.id[:64]!r} was interrupted by a daemon restart before its "
                "result was stored; it may or may not have run, and it will not run "
                "again. Check its effects, then use a new call id if it must run."
            )
            raise OutcomeUnknown(msg)
        return await self._run_tool(session, call, tool, args, on_output, resume=True)

    async def _run_tool(
        self,
        session: Session,
        call: ToolCall,
        tool: Tool[Any],
        args: Any,
        on_output: Callable[[str, bytes], None] | None,
        resume: bool = False,
    ) -> dict[str, Any]:
        ctx = ToolContext(
            session_id=session.id,
            call_id=call.id,
            agent=session.sandbox.agent,
            limits=session.limits,
            env=session.env,
            kill_grace_s=self._config.kill_grace_s,
            stream_cap_bytes=self._config.stream_cap_bytes,
            on_output=on_output,
            shell=self._config.shell,
            state=session.tool_state,
            allowlist=session.allowlist,
            redactor=session.redactor,
            # A resumable tool's command always goes with `resume`: the agent
            # runs a call id it never saw, and answers one it did from what
            # it kept (a previous daemon may have sent it): exactly once
            # without a start record on disk.
            resume=resume or tool.resumable,
            baseline=functools.partial(self._baselines.baseline, session)
            if self._baselines
            else None,
        )
        if tool.holds_workspace:
            # Queued, not refused: a batch of one session's diffs waits for itself.
            async with (
                self._workspace_reads.hold(session.id),
                self._workspace_reads_by_tenant.hold(session.tenant),
            ):
                return await self._run_locked(session, tool, ctx, args)
        return await self._run_locked(session, tool, ctx, args)

    async def _run_locked(
        self, session: Session, tool: Tool[Any], ctx: ToolContext, args: Any
    ) -> dict[str, Any]:
        """`tool.run`, within the session's write lock unless read-only."""
        if tool.read_only:
            return await tool.run(ctx, args)
        async with session.write_lock:
            if session.sandbox.lost:
                if self._manager.stopping:
                    msg = "the daemon is restarting; retry with the same call id"
                    raise DaemonStopping(msg)
                raise SandboxLost(session.sandbox.lost)
            return await tool.run(ctx, args)

    async def execute_batch(
        self, tenant: str, session_id: str, calls: list[ToolCall]
    ) -> list[ToolResult]:
        """One model turn's calls: one result per call, in call order.

        Consecutive read-only calls run together; a call with side effects
        runs alone, after everything before it and before everything after
        it, so the batch behaves as if run in order while reads overlap.
        """
        try:
            await self._manager.lookup(tenant, session_id)
        except SessionUnusable as exc:
            return [ToolResult.failed(c.id, SandboxLost(str(exc))) for c in calls]
        ids = [c.id for c in calls]
        if not all(ids):
            msg = "every ToolCall in a batch needs a non-empty id: results are tied to it"
            raise BadRequest(msg)
        if len(set(ids)) != len(ids):
            msg = "duplicate call ids in one batch; every call needs its own id"
            raise BadRequest(msg)
        await self._manager.quotas.take_calls(tenant, len(calls))
        results: list[ToolResult] = []
        for group in self._batch_groups(calls):
            results += await asyncio.gather(
                *(self._execute_in_batch(tenant, session_id, call) for call in group)
            )
        return results

    def _batch_groups(self, calls: list[ToolCall]) -> list[list[ToolCall]]:
        """Runs of read-only calls, and every other call on its own."""
        groups: list[list[ToolCall]] = []
        reads: list[ToolCall] = []
        for call in calls:
            if self._read_only(call.name):
                reads.append(call)
                continue
            if reads:
                groups.append(reads)
                reads = []
            groups.append([call])
        if reads:
            groups.append(reads)
        return groups

    def _read_only(self, name: str) -> bool:
        try:
            return self._registry.get(name).read_only
        except UnknownTool:
            return False

    def _needs_start_record(self, name: str) -> bool:
        """Whether a call must be recorded as started before it runs: not if
        running it again is harmless (read-only), its agent command says
        itself whether it ran (resumable: always sent with `resume`), or it
        names no tool (answered UNKNOWN_TOOL, nothing run)."""
        try:
            tool = self._registry.get(name)
        except UnknownTool:
            return False
        return not (tool.read_only or tool.resumable)

    async def _execute_in_batch(self, tenant: str, session_id: str, call: ToolCall) -> ToolResult:
        """`execute`, except that a session lost mid-batch answers the rest."""
        try:
            return await self._execute(tenant, session_id, call, None, spend=0)
        except SessionNotFound:
            lost = SandboxLost("the session was closed before this call could run")
            return ToolResult.failed(call.id, lost)
