"""The Agents SDK's terminal path (`exec_command` that may come back still
running, then `write_stdin`) over toolrt's streaming `Exec`.

Each SDK process is one `Exec` stream, with `tty` when the model asks for a
terminal: a task pumps its events into a queue, and the SDK's own
`collect_pty_output` reads that queue until the model's yield time or the
program's end, as it does for its Docker client. A program left running past
the turn keeps running until written to again, its `timeout_s` (the session's
`call_timeout_s` unless given) or the session's stop, which ends them all.
A start or write whose caller is cancelled (the harness cancelled its run)
stops the program it was waiting on.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from agents.sandbox.errors import (  # type: ignore[import-not-found,unused-ignore]
    ExecTransportError,
    PtySessionNotFoundError,
)
from agents.sandbox.session.pty_output import (  # type: ignore[import-not-found,unused-ignore]
    collect_pty_output,
)
from agents.sandbox.session.pty_types import (  # type: ignore[import-not-found,unused-ignore]
    PTY_PROCESSES_MAX,
    PtyExecUpdate,
    allocate_pty_process_id,
    clamp_pty_yield_time_ms,
    process_id_to_prune_from_meta,
    resolve_pty_write_yield_time_ms,
)

from runtime.client import ToolrtRpcError
from runtime.client.aio import AsyncClient
from runtime.client.aio_programs import AsyncExecStream

# A terminal's window: what a program reads before anyone resizes it.
TERMINAL_SIZE = (24, 80)
# The SDK's defaults for a start and for a write without a yield time.
START_YIELD_MS = 10_000
WRITE_YIELD_MS = 250
# The SDK's tool recognises this message and tells the model to start with tty.
NO_STDIN = "stdin is not available for this process"


def transport_error(argv: list[str], exc: ToolrtRpcError) -> ExecTransportError:
    """The SDK's error for a command toolrt refused or lost, with toolrt's reason."""
    message = f"{exc.reason or exc.code.name}: {exc.details}"
    return ExecTransportError(command=argv, message=message, cause=exc)


@dataclass
class _Process:
    """One running `Exec`: its output as the SDK's collector reads it."""

    stream: AsyncExecStream
    tty: bool
    chunks: deque[bytes] = field(default_factory=deque)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    notify: asyncio.Event = field(default_factory=asyncio.Event)
    # Set at "started", or at the stream's end when it never started (a refusal).
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    started: bool = False
    exit_code: int | None = None
    error: ToolrtRpcError | None = None
    last_used: float = field(default_factory=time.monotonic)
    pump: asyncio.Task[None] | None = None

    async def run_pump(self) -> None:
        try:
            async for kind, value in self.stream.events():
                if kind == "started":
                    self.started = True
                    self.settled.set()
                elif kind in ("stdout", "stderr"):
                    async with self.lock:
                        self.chunks.append(bytes(value))
                elif kind == "exit":
                    self.exit_code = int(value.exit_code)
                self.notify.set()
        except ToolrtRpcError as exc:
            self.error = exc
        finally:
            self.closed.set()
            self.settled.set()
            self.notify.set()

    async def collect(self, yield_time_ms: int, max_output_tokens: int | None) -> PtyExecUpdate:
        output, tokens, _closed = await collect_pty_output(
            output_chunks=self.chunks,
            output_lock=self.lock,
            output_notify=self.notify,
            is_done=self.closed.is_set,
            yield_time_ms=yield_time_ms,
            max_output_tokens=max_output_tokens,
        )
        self.last_used = time.monotonic()
        return PtyExecUpdate(
            process_id=None, output=output, exit_code=None, original_token_count=tokens
        )

    async def terminate(self) -> None:
        # Cancelling the RPC kills the program's whole tree in the sandbox.
        self.stream.cancel()
        if self.pump is not None:
            self.pump.cancel()
            await asyncio.gather(self.pump, return_exceptions=True)


class Terminals:
    """The SDK processes of one toolrt session, by the ids the model sees."""

    def __init__(self) -> None:
        self._processes: dict[int, _Process] = {}
        self._lock = asyncio.Lock()

    async def start(
        self,
        client: AsyncClient,
        session_id: str,
        argv: list[str],
        *,
        tty: bool,
        user: str,
        timeout: float | None,
        yield_time_s: float | None,
        max_output_tokens: int | None,
    ) -> PtyExecUpdate:
        fields: dict[str, Any] = {"user": user, "tty": tty, "stdin_open": tty}
        if tty:
            fields["size"] = TERMINAL_SIZE
        if timeout:
            fields["timeout_s"] = timeout
        process = _Process(stream=client.exec_stream(session_id, argv, **fields), tty=tty)
        process.pump = asyncio.create_task(process.run_pump())
        wait_ms = START_YIELD_MS if yield_time_s is None else int(yield_time_s * 1000)
        async with self._stopped_if_cancelled(process):
            # Refusals (a user not allowed, a closed session) come before "started".
            await process.settled.wait()
            if not process.started and process.error is not None:
                raise transport_error(argv, process.error) from process.error
            async with self._lock:
                process_id = allocate_pty_process_id(set(self._processes))
                full = len(self._processes) >= PTY_PROCESSES_MAX
                pruned = self._pop_least_used() if full else None
                self._processes[process_id] = process
            if pruned is not None:
                await pruned.terminate()
            update = await process.collect(clamp_pty_yield_time_ms(wait_ms), max_output_tokens)
        return await self._finish(process_id, process, update)

    async def write(
        self,
        process_id: int,
        chars: str,
        yield_time_s: float | None,
        max_output_tokens: int | None,
    ) -> PtyExecUpdate:
        async with self._lock:
            process = self._processes.get(process_id)
        if process is None:
            raise PtySessionNotFoundError(session_id=process_id)
        if chars:
            if not process.tty:
                raise RuntimeError(NO_STDIN)
            if not process.closed.is_set():
                await process.stream.write(chars.encode())
        wait_ms = WRITE_YIELD_MS if yield_time_s is None else int(yield_time_s * 1000)
        yield_ms = resolve_pty_write_yield_time_ms(yield_time_ms=wait_ms, input_empty=not chars)
        async with self._stopped_if_cancelled(process):
            update = await process.collect(yield_ms, max_output_tokens)
        return await self._finish(process_id, process, update)

    @asynccontextmanager
    async def _stopped_if_cancelled(self, process: _Process) -> AsyncIterator[None]:
        """A harness that cancels its run while waiting on a program stops it:
        a session passed in to the runner outlives the run, and the program
        must not (a session the runner created is stopped anyway)."""
        try:
            yield
        except asyncio.CancelledError:
            async with self._lock:
                for process_id, known in list(self._processes.items()):
                    if known is process:
                        del self._processes[process_id]
            await process.terminate()
            raise

    async def terminate_all(self) -> None:
        async with self._lock:
            processes = list(self._processes.values())
            self._processes.clear()
        for process in processes:
            await process.terminate()

    async def _finish(
        self, process_id: int, process: _Process, update: PtyExecUpdate
    ) -> PtyExecUpdate:
        """The update with the id to write to while the program runs, its exit code once ended."""
        if not process.closed.is_set():
            return PtyExecUpdate(
                process_id=process_id,
                output=update.output,
                exit_code=None,
                original_token_count=update.original_token_count,
            )
        async with self._lock:
            self._processes.pop(process_id, None)
        await process.terminate()
        # A stream broken before its exit (the session lost) has no exit code: 1 says it failed.
        exit_code = process.exit_code if process.exit_code is not None else 1
        return PtyExecUpdate(
            process_id=None,
            output=update.output,
            exit_code=exit_code,
            original_token_count=update.original_token_count,
        )

    def _pop_least_used(self) -> _Process | None:
        meta = [(pid, p.last_used, p.closed.is_set()) for pid, p in self._processes.items()]
        process_id = process_id_to_prune_from_meta(meta)
        return None if process_id is None else self._processes.pop(process_id)
