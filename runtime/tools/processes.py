"""`process_list`, `process_output`, `process_kill`: the session's background processes.

A `shell` call started with `background: true`, or one that went silent past
its idle timeout, keeps running in the sandbox under a handle (`p1`, `p2`,
...). The agent keeps each one's newest output in a ring buffer; these tools
list the handles, read (and wait on) their output, and stop them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import regex
from pydantic import BaseModel, ConfigDict, Field, field_validator

from runtime import cpu
from runtime.agent import protocol
from runtime.agent.redact import Redactor
from runtime.errors import InvalidArguments
from runtime.tools.base import Tool, ToolContext
from runtime.tools.output import render_stream
from runtime.tools.validation import no_nul

POLL_S = 0.1
# A model-written pattern runs against untrusted output: bound its time. It
# runs off the event loop (cpu.py) and lets go of the GIL while it matches.
MATCH_TIMEOUT_S = 0.2

LIST_DESCRIPTION = """\
List this session's background processes (started by shell with \
background: true, or moved to the background after going silent): \
process_id, pid, command, state (running while any process it started \
runs; exited; killed), exit_code of its main process, runtime_s, and \
unread_bytes of output not read yet with process_output. Use it to find a \
handle again; ordinary shell calls never appear here.\
"""

OUTPUT_DESCRIPTION = """\
Read the output a background process printed since the last read (stdout and \
stderr together, in arrival order), with its state and exit code.

With wait_for (a regular expression), wait until the new output matches it, \
e.g. "Listening on|Serving" for a server that is ready, then return \
(matched: true). With timeout_s and no wait_for, wait until the process \
exits. Either way it returns when the process exits or timeout_s (default \
30 s when waiting) passes; matched: false then. Only the newest output of a \
process is kept (dropped_bytes says how much was lost between reads). Not \
for ordinary commands: shell returns their output itself.\
"""

INPUT_DESCRIPTION = """\
Type text into a background process started by shell with background: true \
and tty: true (a REPL, a program waiting at a prompt), as at a keyboard: end \
a line with "\\n" to send it; "\\u0003" is Ctrl-C, "\\u0004" Ctrl-D (end of \
input). Returns bytes_written; then read the answer with process_output \
(wait_for the next prompt). Processes without a terminal cannot be typed into.\
"""

KILL_DESCRIPTION = """\
Stop a background process and every process it started (TERM, then KILL \
after a short grace). Returns its final state. Use process_list to find the \
process_id. Stop servers you no longer need: a session runs only a few \
background processes at once.\
"""


class ProcessListArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProcessIdArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    process_id: str = Field(
        min_length=1,
        max_length=64,
        description="The handle shell returned, such as p1.",
    )


class ProcessOutputArgs(ProcessIdArgs):
    wait_for: str | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="Regular expression to wait for in the new output (e.g. Listening).",
    )
    timeout_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Longest wait in seconds (default 30 with wait_for; capped by the "
        "session's call timeout).",
    )

    @field_validator("wait_for")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                regex.compile(value)
            except regex.error as exc:
                msg = f"not a valid regular expression: {exc}"
                raise ValueError(msg) from exc
        return value


class ProcessInputArgs(ProcessIdArgs):
    text: str = Field(
        max_length=65536,
        description='What to type; "\\n" ends a line (sent as Enter).',
    )

    _text = field_validator("text")(no_nul)


def _info(info: protocol.ProcessInfo) -> dict[str, Any]:
    return {
        "process_id": info.process_id,
        "pid": info.pid,
        "command": info.command,
        "state": info.state,
        "exit_code": info.exit_code,
        "runtime_s": info.runtime_s,
    }


async def run_list(ctx: ToolContext, args: ProcessListArgs) -> dict[str, Any]:
    processes = await ctx.agent.process_list()
    return {"processes": [protocol.to_dict(p) for p in processes]}


async def run_input(ctx: ToolContext, args: ProcessInputArgs) -> dict[str, Any]:
    # A terminal's Enter is a carriage return: the line discipline makes it
    # the newline a program reads, where a bare "\n" would not submit a
    # line to a program that set its terminal raw (a REPL's line editor).
    data = args.text.replace("\r\n", "\n").replace("\n", "\r").encode()
    written = await ctx.agent.process_input(args.process_id, data)
    output: dict[str, Any] = {"process_id": args.process_id, "bytes_written": written}
    if written < len(data):
        output["note"] = (
            f"the terminal took {written} of {len(data)} bytes (its input is full: "
            "read with process_output, then type the rest)"
        )
    return output


async def run_kill(ctx: ToolContext, args: ProcessIdArgs) -> dict[str, Any]:
    reply = await ctx.agent.process_kill(args.process_id)
    return {**_info(reply.process), "was_running": reply.was_running}


class _Collected:
    """Output gathered over the polls of one call, newest `cap` bytes kept."""

    def __init__(self, cap: int, redactor: Redactor) -> None:
        self.cap = cap
        self.redactor = redactor
        self.data = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes, dropped: int) -> None:
        self.dropped += dropped
        self.data += chunk
        excess = len(self.data) - self.cap
        if excess > 0:
            self.dropped += excess
            del self.data[:excess]

    def text(self) -> tuple[str, bool]:
        """The output as text, and whether invalid UTF-8 was replaced."""
        text, replaced = render_stream(bytes(self.data), b"", len(self.data), 0, self.redactor)
        if self.dropped:
            # The oldest output went: what is kept may begin inside a secret.
            text = self.redactor.redact_text(text, cut_before=True)
        return text, replaced


def _matches(pattern: regex.Pattern[str], collected: _Collected) -> bool:
    """Whether the output so far matches (decoded as the model will see it)."""
    text = collected.text()[0]
    try:
        return pattern.search(text, timeout=MATCH_TIMEOUT_S, concurrent=True) is not None
    except TimeoutError as exc:
        msg = "wait_for took too long to match (catastrophic backtracking?); simplify it"
        raise InvalidArguments(msg) from exc


async def run_output(ctx: ToolContext, args: ProcessOutputArgs) -> dict[str, Any]:
    waits = args.wait_for is not None or args.timeout_s is not None
    timeout = min(args.timeout_s or 30.0, ctx.limits.call_timeout_s) if waits else 0.0
    deadline = time.monotonic() + timeout
    pattern = regex.compile(args.wait_for) if args.wait_for else None
    collected = _Collected(ctx.limits.output_cap_bytes, ctx.redactor)
    matched = False
    while True:
        reply, body = await ctx.agent.process_output(args.process_id)
        collected.add(body, reply.dropped_bytes)
        if pattern is not None and body:
            matched = await cpu.compute(len(collected.data), _matches, pattern, collected)
        if matched or reply.process.state != "running" or time.monotonic() >= deadline:
            break
        await asyncio.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
    text, replaced = await cpu.compute(len(collected.data), collected.text)
    output = {**_info(reply.process), "output": text, "dropped_bytes": collected.dropped}
    if replaced:
        output["invalid_utf8_replaced"] = True
    if pattern is not None:
        output["matched"] = matched
    return output


PROCESS_LIST = Tool(
    name="process_list",
    description=LIST_DESCRIPTION,
    arguments=ProcessListArgs,
    run=run_list,
    read_only=True,
)
PROCESS_OUTPUT = Tool(
    name="process_output",
    description=OUTPUT_DESCRIPTION,
    arguments=ProcessOutputArgs,
    run=run_output,
    read_only=True,
)
PROCESS_INPUT = Tool(
    name="process_input",
    description=INPUT_DESCRIPTION,
    arguments=ProcessInputArgs,
    run=run_input,
    read_only=False,
)
PROCESS_KILL = Tool(
    name="process_kill",
    description=KILL_DESCRIPTION,
    arguments=ProcessIdArgs,
    run=run_kill,
    read_only=False,
)
