"""`python`: run code in the session's Python interpreter, which remembers."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runtime.agent import protocol
from runtime.errors import CallTimeout, ExecutionError, FileMissing, LimitExceeded, ToolFailure
from runtime.tools.base import Tool, ToolContext
from runtime.tools.interpreter import CannotStart, Ended, Interpreter
from runtime.tools.output import render_stream
from runtime.tools.shell import command_env

# After the KeyboardInterrupt, how long a cell has to stop before the
# interpreter is killed and started afresh.
INTERRUPT_GRACE_S = 2.0
# The interpreter's memory ceiling (RLIMIT_AS: address space, which runs
# above the memory really used) as a share of the session's memory, and at
# least this much (the libraries alone map a few hundred MiB).
MEMORY_SHARE = 0.75
MEMORY_FLOOR = 256 << 20
# Keep BLAS and glibc from mapping address space per thread and core: under
# RLIMIT_AS mappings count whether used or not.
LEAN_ENV = {
    "MPLBACKEND": "Agg",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MALLOC_ARENA_MAX": "2",
}

DESCRIPTION = """\
Run Python code in this session's Python interpreter, which keeps its state \
between calls like a notebook: variables, imports, functions and loaded data \
stay for the next call. numpy, pandas and matplotlib are there.

You get stdout, stderr, `result` (the repr of the last expression, as in a \
notebook cell) and `outputs`: a DataFrame as an HTML and a text table, and \
every matplotlib figure left open as a PNG image you can see (figures are \
closed afterwards; plt.show() is not needed). An exception gives \
EXECUTION_ERROR with its name, message and traceback; the state from before \
it stays.

It runs as an unprivileged user in /workspace (files written there are seen \
by the other tools). input() gets end of file; processes the code starts are \
stopped when the call ends. A call past timeout_s is interrupted \
(KeyboardInterrupt) and gives TIMEOUT; if it will not stop, or past the \
interpreter's memory ceiling, the interpreter is restarted and its variables \
are lost (the result says restarted: true). sys.exit() ends it; the next call \
starts a new one. reset: true starts afresh on purpose. Use the shell tool \
for commands and pip installs.\
"""


class PythonArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(
        min_length=1,
        max_length=1_000_000,
        description="Python source to run, like a notebook cell; the value of a last "
        "expression is returned.",
    )
    timeout_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Seconds before the code is interrupted (capped by the session's maximum).",
    )
    reset: bool = Field(
        False, description="Start a fresh interpreter first: every variable and import is gone."
    )


def memory_ceiling(memory_bytes: int) -> int:
    """The interpreter's address-space ceiling for a session with this much memory (0: none)."""
    if memory_bytes <= 0:
        return 0
    return max(MEMORY_FLOOR, int(memory_bytes * MEMORY_SHARE))


async def run(ctx: ToolContext, args: PythonArgs) -> dict[str, Any]:
    state = ctx.state
    notes: list[str] = []
    if args.reset:
        await state.stop_interpreter()
        state.interpreter_ended = ""
    elif state.interpreter is not None and state.interpreter.ended:
        state.interpreter_ended = state.interpreter.ended
        state.interpreter = None
    if state.interpreter_ended and state.interpreter is None:
        notes.append(f"a new interpreter: the previous one ended ({state.interpreter_ended})")
        state.interpreter_ended = ""
    if state.interpreter is None:
        env = {**command_env(ctx.env, None), **LEAN_ENV}
        ceiling = memory_ceiling(ctx.limits.memory_bytes)
        if ceiling:
            env["TOOLRT_INTERPRETER_MEMORY"] = str(ceiling)
        try:
            state.interpreter = await Interpreter.start(ctx.agent, env)
        except CannotStart as failed:
            raise await _why_not_started(ctx, failed) from None
    interpreter = state.interpreter
    timeout = min(args.timeout_s or ctx.limits.call_timeout_s, ctx.limits.call_timeout_s)
    restarted = bool(notes)
    try:
        answer = await _answer_within(ctx, interpreter, args.code, timeout)
    except Ended as ended:
        await state.stop_interpreter()
        output = {"restarted": True, "stdout": "", "stderr": ""}
        msg = f"the interpreter ended during the call ({ended.why}); the next call starts a new one"
        raise ExecutionError(msg, output) from None
    output = _output(ctx, answer, restarted)
    if notes:
        output["note"] = "; ".join(notes)
    if "exit" in answer:
        await state.stop_interpreter()
        state.interpreter_ended = f"the code called sys.exit({answer['exit']})"
        output["note"] = (
            f"{state.interpreter_ended}: the interpreter ended; the next call starts a new one"
        )
    if answer.get("memory"):
        await state.stop_interpreter()
        output["restarted"] = True
        ceiling = memory_ceiling(ctx.limits.memory_bytes) >> 20
        msg = (
            f"the code went past the interpreter's memory ceiling ({ceiling} MiB of address "
            "space): it was stopped and its variables are gone; the next call starts a new one"
        )
        raise LimitExceeded(msg, output)
    error = answer.get("error")
    if answer.get("interrupted"):
        output["reason"] = "deadline"
        msg = f"the code ran past timeout_s ({timeout:g} s) and was interrupted; the state is kept"
        raise CallTimeout(msg, output)
    if isinstance(error, dict):
        msg = f"{error.get('name')}: {error.get('message')}"
        raise ExecutionError(msg, output)
    return output


async def _why_not_started(ctx: ToolContext, failed: CannotStart) -> ToolFailure:
    """What the model is told when the interpreter cannot start: the image has
    no python3, or why else it did not start."""
    probe = protocol.Exec(command="command -v python3", env=command_env(ctx.env, None))
    with contextlib.suppress(ToolFailure):
        found, _ = await ctx.agent.exec(probe)
        if found.exit_code != 0:
            return FileMissing(
                "this session's image has no python3, which the python tool runs; use the "
                "shell tool, or a session of an image with Python 3"
            )
    return failed


async def _answer_within(
    ctx: ToolContext, interpreter: Interpreter, code: str, timeout: float
) -> dict[str, Any]:
    """The cell's answer; past `timeout` a KeyboardInterrupt, then a restart."""
    asking = asyncio.ensure_future(interpreter.ask(code, ctx.on_output))
    try:
        done, _ = await asyncio.wait({asking}, timeout=timeout)
        if not done:
            interpreter.interrupt()
            done, _ = await asyncio.wait({asking}, timeout=INTERRUPT_GRACE_S)
    except asyncio.CancelledError:
        # The caller went away: the cell stops too (its answer, when it
        # comes, is taken by `asking`, not by the next call).
        interpreter.interrupt()
        raise
    if done:
        return asking.result()
    asking.cancel()
    await ctx.state.stop_interpreter()
    output = {"restarted": True, "reason": "deadline", "stdout": "", "stderr": ""}
    msg = (
        f"the code ran past timeout_s ({timeout:g} s) and did not stop when interrupted: the "
        "interpreter was restarted and its variables are gone"
    )
    raise CallTimeout(msg, output)


def _output(ctx: ToolContext, answer: dict[str, Any], restarted: bool) -> dict[str, Any]:
    output: dict[str, Any] = {}
    for name in ("stdout", "stderr"):
        stream = answer.get(name) or {}
        head = str(stream.get("head", "")).encode()
        tail = str(stream.get("tail", "")).encode()
        output[name], _ = render_stream(
            head, tail, int(stream.get("total", 0)), redactor=ctx.redactor
        )
    output["result"] = answer.get("result")
    output["outputs"] = [
        {"type": str(item.get("type")), "data": str(item.get("data"))}
        for item in answer.get("outputs") or []
        if isinstance(item, dict)
    ]
    if answer.get("outputs_dropped"):
        output["outputs_dropped"] = answer["outputs_dropped"]
    if isinstance(answer.get("error"), dict):
        output["error"] = {
            k: str(answer["error"].get(k, "")) for k in ("name", "message", "traceback")
        }
    if restarted:
        output["restarted"] = True
    return output


PYTHON = Tool("python", DESCRIPTION, PythonArgs, run)
