"""A session's Python interpreter, seen from the daemon.

The interpreter (`runtime/agent/interpreter.py`) is a program the agent
starts once per session with a Spawn, as the sandbox user in /workspace,
and keeps until it ends: the daemon writes a cell as a JSON line to its
stdin and reads the answer, a JSON line, from its stdout. Stopping it is
closing that Spawn (the agent kills its whole tree); interrupting a cell
is a SIGINT to its process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from runtime.agent import protocol
from runtime.errors import ProgramError, ToolFailure
from runtime.sandbox.agent_client import AgentClient
from runtime.sandbox.backend import AGENT_DIR_IN_SANDBOX

SERVER = f"{AGENT_DIR_IN_SANDBOX}/interpreter.py"
# It lives with its session: no deadline of its own (the agent's is a year).
LIFETIME_S = 365 * 86400.0
# What a cell's answer line may carry (its images included); the agent's cap
# on the program's whole output is far above, over its lifetime.
OUTPUT_CAP = 1 << 60
START_SECONDS = 30.0
# Lines of its own stderr kept to say why it ended (a crash before serving).
STDERR_KEPT = 4096

Input = tuple[protocol.Stdin | protocol.Signal, bytes]


class CannotStart(ToolFailure):
    """The interpreter did not start (the caller finds out why: no python3, no Spawn)."""

    def __init__(self, why: str) -> None:
        super().__init__(f"the Python interpreter could not start: {why}")
        self.why = why


class Ended(Exception):
    """The interpreter ended (exit, kill, crash) before answering."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class Interpreter:
    """One running interpreter: send cells, read answers, interrupt, stop."""

    def __init__(self) -> None:
        self._inputs: asyncio.Queue[Input | None] = asyncio.Queue()
        self._answers: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._stderr = b""
        # Where the running cell's output goes as it comes (ExecuteStream), if anywhere.
        self._on_output: Callable[[str, bytes], None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.ended: str = ""

    @classmethod
    async def start(cls, agent: AgentClient, env: dict[str, str]) -> Interpreter:
        """A new interpreter, ready for cells; a ToolFailure when the image cannot run it."""
        self = cls()
        request = protocol.Spawn(
            env=env, timeout_s=LIFETIME_S, stdin_open=True, output_cap=OUTPUT_CAP
        )
        events = agent.spawn(request, ["python3", SERVER], self._fed())
        self._task = asyncio.ensure_future(self._read(events))
        try:
            async with asyncio.timeout(START_SECONDS):
                ready = await self._answers.get()
        except TimeoutError:
            await self.stop()
            msg = f"the Python interpreter did not start within {START_SECONDS:g} s"
            raise ToolFailure(msg) from None
        if ready is None:
            await self.stop()
            raise CannotStart(self.ended)
        return self

    async def _fed(self) -> AsyncIterator[Input]:
        while (item := await self._inputs.get()) is not None:
            yield item

    async def _read(self, events: Any) -> None:
        pending = b""
        try:
            async with contextlib.aclosing(events):
                async for message, chunk in events:
                    if isinstance(message, protocol.Output) and message.stream == "stdout":
                        pending += chunk
                        *lines, pending = pending.split(b"\n")
                        for line in lines:
                            answer = _answer(line)
                            if answer is None:
                                self.ended = "it answered with something other than a JSON line"
                                return
                            if "out" in answer:
                                self._streamed(answer)
                            else:
                                self._answers.put_nowait(answer)
                    elif isinstance(message, protocol.Output):
                        self._stderr = (self._stderr + chunk)[-STDERR_KEPT:]
                    elif isinstance(message, protocol.SpawnExit):
                        self.ended = _exit_reason(message)
        except ProgramError as exc:
            self.ended = f"{exc.error_reason}: {exc}"
        except Exception as exc:  # the sandbox is gone: the call says so when it asks
            self.ended = str(exc) or type(exc).__name__
        finally:
            if not self.ended:
                self.ended = "it stopped"
            if self._stderr:
                self.ended += f"; its stderr ended with: {self._stderr.decode(errors='replace')}"
            self._answers.put_nowait(None)

    def _streamed(self, event: dict[str, Any]) -> None:
        sink, name = self._on_output, event.get("out")
        if sink is not None and name in ("stdout", "stderr"):
            sink(str(name), str(event.get("data", "")).encode())

    async def ask(
        self, code: str, on_output: Callable[[str, bytes], None] | None = None
    ) -> dict[str, Any]:
        """The answer to one cell (its output sent to `on_output` as it comes);
        Ended if the interpreter ends first."""
        if self.ended:
            raise Ended(self.ended)
        line = json.dumps({"code": code, "stream": on_output is not None}).encode() + b"\n"
        self._on_output = on_output
        try:
            await self._inputs.put((protocol.Stdin(), line))
            answer = await self._answers.get()
        finally:
            if self._on_output is on_output:  # not a later call's
                self._on_output = None
        if answer is None:
            raise Ended(self.ended)
        return answer

    def interrupt(self) -> None:
        """SIGINT to its process group: KeyboardInterrupt in the running cell."""
        self._inputs.put_nowait((protocol.Signal(signal="INT"), b""))

    async def stop(self) -> None:
        """End it and its whole tree (closing the Spawn kills them)."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        self.ended = self.ended or "it was stopped"


def _answer(line: bytes) -> dict[str, Any] | None:
    try:
        answer = json.loads(line)
    except ValueError:
        answer = None
    return answer if isinstance(answer, dict) else None


def _exit_reason(end: protocol.SpawnExit) -> str:
    if end.oom:
        return "it was killed for lack of memory"
    if end.signal:
        return f"it was killed by SIG{end.signal}"
    return f"it exited with code {end.exit_code}"
