"""`shell`: run a bash command in the session's sandbox."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runtime.agent import protocol, records
from runtime.agent.redact import Redactor
from runtime.constants import WORKSPACE
from runtime.errors import CallTimeout, FileMissing, InvalidArguments, LimitExceeded, PathDenied
from runtime.tools.base import Tool, ToolContext
from runtime.tools.network import NO_NETWORK_SHELL
from runtime.tools.output import render_stream
from runtime.tools.paths import refuse_long_path
from runtime.tools.shell_state import HOME
from runtime.tools.validation import command_too_long, env_problem, no_nul

# What every command sees before the session's and the call's own env: no
# pagers, no prompts, no terminal tricks (stdin is closed, there is no TTY).
BASE_ENV = {
    # First: what `pip install` puts in the user's site (HOME/.local/bin).
    "PATH": f"{WORKSPACE}/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": WORKSPACE,
    "USER": "sandbox",
    "LOGNAME": "sandbox",
    "SHELL": "/bin/bash",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
    "CI": "1",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",
    "DEBIAN_FRONTEND": "noninteractive",
    # An editor would wait for a terminal: fail fast and say so instead.
    "GIT_EDITOR": "false",
    "EDITOR": "false",
    "VISUAL": "false",
    "PYTHONUNBUFFERED": "1",
}

DESCRIPTION = f"""\
Run a bash command in this session's Linux sandbox (Debian, python3, pytest, \
git) and get its exit code, stdout and stderr.

Use it to build, run programs and scripts, inspect the system, use git, or \
anything without a dedicated tool. Prefer read_file/write_file/edit_file for \
file contents when they are available: they are exact and cheaper.

{NO_NETWORK_SHELL} Commands \
run as an unprivileged user; /workspace (writable, size-capped) and /tmp are \
writable, the rest of the filesystem is read-only.

Like a terminal: a `cd` holds for the next calls (the first call starts in \
/workspace; `cwd` runs one call elsewhere). Exported variables persist only \
with persist_env: true; `env` sets variables for this call alone.

Never interactive: stdin is empty (or the `stdin` text you pass), there is no \
terminal, pagers are off, and prompts get end-of-file: pass flags like -y, \
--yes or git commit -m. If a command prints nothing for idle_timeout_s \
(default 60 s) it is taken to be stuck on something: you get TIMEOUT with \
reason "idle" and the last lines it printed, and it keeps running as a \
background process (its process_id is in the result: follow it with \
process_output, stop it with process_kill), or is killed with on_idle: "kill". \
For quiet builds or test runs that legitimately print nothing for minutes, \
raise idle_timeout_s. timeout_s (default and maximum set by the session) is a \
hard wall-clock limit: the command and everything it started are killed \
(reason "deadline"). A timeout_s you pass still holds after a move to the \
background: the process and its children are killed at that deadline \
(process_output then says state "killed"); without timeout_s, a command moved \
to the background runs until you stop it or the session ends.

Servers and watchers: start them with background: true; you get a \
process_id, the pid and the first output at once, and the process runs until \
you stop it or the session ends (no timeout_s); then process_output with \
wait_for (a regex such as "Listening") waits until it is ready, process_list \
shows what runs, process_kill stops a process and its children.

Interactive programs (a REPL such as python3 -i, a prompt that must be \
answered): start them with background: true and tty: true, which gives them \
a terminal; type into it with process_input (end a line with "\\n"; \
"\\u0003" is Ctrl-C) and read what it printed, your typing echoed, with \
process_output.

Output over the cap keeps its beginning and its end with a marker saying how \
many bytes and lines were dropped; terminal colour codes are removed. \
merge_output: true gives one stream (stdout and stderr in arrival order); \
pipefail: true makes a pipeline fail when any part of it fails.\
"""


class ShellArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1, description="The bash command line to run.")
    cwd: str | None = Field(
        None,
        description="Absolute directory to run in. Default: where the previous call ended "
        "(first call: /workspace).",
    )
    timeout_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Seconds before the command and its children are killed "
        "(capped by the session's maximum); still applies if it moves to the background "
        "when silent.",
    )
    idle_timeout_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Seconds without any output before the call returns TIMEOUT "
        "(reason idle). Default 60; raise it for quiet builds.",
    )
    on_idle: Literal["background", "kill"] = Field(
        "background",
        description='What happens to a silent command: "background" keeps it running '
        'with a process_id, "kill" stops it.',
    )
    env: dict[str, str] | None = Field(
        None, description="Extra environment variables for this command only."
    )
    stdin: str | None = Field(None, description="Text fed to the command's standard input.")
    background: bool = Field(
        False,
        description="Start a long-running command (a server, a watcher) and return at once "
        "with its process_id and first output.",
    )
    tty: bool = Field(
        False,
        description="With background: true, run it in a terminal (one output stream) "
        "to type into with process_input: REPLs, prompts.",
    )
    pipefail: bool = Field(False, description="Fail a pipeline when any command in it fails.")
    merge_output: bool = Field(
        False, description="One combined stream in arrival order, returned as stdout."
    )
    persist_env: bool = Field(
        False, description="Keep variables this command exports for the following calls."
    )

    _text = field_validator("command", "stdin")(no_nul)

    @field_validator("cwd")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or "\x00" in value):
            msg = "must be an absolute path such as /workspace/src"
            raise ValueError(msg)
        return value

    @field_validator("command")
    @classmethod
    def _fits_one_argument(cls, value: str) -> str:
        problem = command_too_long(value)
        if problem:
            msg = f"{problem}: write a longer script to a file with write_file and run the file"
            raise ValueError(msg)
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key, item in (value or {}).items():
            problem = env_problem(key, item)
            if problem:
                msg = f"environment variable {key[:60]!r}: {problem}"
                raise ValueError(msg)
        return value


def shell_output(
    result: protocol.ExecResult, body: bytes, redactor: Redactor | None = None
) -> dict[str, Any]:
    """The agent's ExecResult as DESIGN.md's `shell` output_json."""
    out, err = result.stdout, result.stderr
    cut = out.head + out.tail
    stdout, bad_out = render_stream(
        body[: out.head], body[out.head : cut], out.total, out.dropped_lines, redactor
    )
    err_body = body[cut:]
    stderr, bad_err = render_stream(
        err_body[: err.head], err_body[err.head :], err.total, err.dropped_lines, redactor
    )
    output: dict[str, Any] = {
        "exit_code": result.exit_code,
        "stdout": stdout,
        "stderr": stderr,
        "stdout_truncated": out.total > out.head + out.tail,
        "stderr_truncated": err.total > err.head + err.tail,
        "stdout_total_bytes": out.total,
        "stderr_total_bytes": err.total,
        "timed_out": result.killed in ("deadline", "idle") or result.idle,
    }
    if output["timed_out"]:
        output["reason"] = "deadline" if result.killed == "deadline" else "idle"
    proc = result.background
    if proc is not None:
        output.update(process_id=proc.process_id, pid=proc.pid, state=proc.state)
    if bad_out or bad_err:
        output["invalid_utf8_replaced"] = True
    return output


def command_env(session_env: dict[str, str], call_env: dict[str, str] | None) -> dict[str, str]:
    """The environment of a command that does not use the shell's session state."""
    return {**BASE_ENV, **session_env, **(call_env or {})}


def exec_request(
    ctx: ToolContext,
    args: ShellArgs,
    cwd: str,
    env: dict[str, str],
    call_id: str,
    session_env: dict[str, str],
) -> protocol.Exec:
    """The agent's Exec request for one call: `env` is the command's,
    `session_env` the session's own (without the call's one-call `env`)."""
    timeout = min(args.timeout_s or ctx.limits.call_timeout_s, ctx.limits.call_timeout_s)
    idle = args.idle_timeout_s or ctx.shell.idle_timeout_s
    return protocol.Exec(
        command=args.command,
        cwd=cwd,
        env=env,
        spare_env=session_env,
        call_id=call_id,
        resume=ctx.resume,
        timeout_s=timeout,
        # Silence longer than the deadline can never be noticed: leave it off.
        idle_timeout_s=idle if idle < timeout else 0,
        on_idle=args.on_idle,
        # Only a timeout the caller chose bounds a command moved to the
        # background when silent; the default would end a quiet server.
        deadline_after_idle=args.timeout_s is not None,
        background=args.background,
        settle_s=ctx.shell.settle_s,
        max_background=ctx.shell.max_background,
        ring_cap=ctx.shell.background_buffer_bytes,
        pipefail=args.pipefail,
        merge_output=args.merge_output,
        report_state=not args.background,
        report_env=args.persist_env and not args.background,
        grace_s=ctx.kill_grace_s,
        output_cap=ctx.limits.output_cap_bytes,
        head_fraction=ctx.shell.head_fraction,
        stream=ctx.on_output is not None,
        stream_cap=ctx.stream_cap_bytes,
        tty=args.tty,
    )


async def run_shell(ctx: ToolContext, args: ShellArgs) -> dict[str, Any]:
    state = ctx.state.shell
    if args.tty and not args.background:
        msg = "tty: true needs background: true (then type with process_input)"
        raise InvalidArguments(msg)
    if args.cwd is not None:
        # Anywhere the sandbox user may enter, within the kernel's limits.
        refuse_long_path(args.cwd, "cwd")
    session_env = state.environment({**BASE_ENV, **ctx.env})
    env = {**session_env, **(args.env or {})}
    request = exec_request(ctx, args, args.cwd or state.cwd, env, ctx.call_id, session_env)
    stdin = (args.stdin or "").encode()
    notes: list[str] = []
    try:
        result, data = await ctx.agent.exec(request, stdin, ctx.on_output)
    except (FileMissing, PathDenied, InvalidArguments) as exc:
        if args.cwd is not None or state.cwd == HOME:
            raise
        # The remembered directory cannot be entered any more (removed,
        # locked, replaced): start over at home. A failure that is not about
        # the directory fails again there, and the directory is kept.
        # A new command (nothing ran: the directory could not be entered).
        retry = records.replace(request, cwd=HOME, resume=False)
        result, data = await ctx.agent.exec(retry, stdin, ctx.on_output)
        gone, state.cwd = state.cwd, HOME
        why = "no longer exists"
        if not isinstance(exc, FileMissing):
            why = f"cannot be entered ({str(exc).rsplit(': ', 1)[-1]})"
        notes.append(f"the previous working directory {gone} {why}; ran in {HOME}")
    output = shell_output(result, data, ctx.redactor)
    notes += result.notes
    if result.shell_state is not None:
        note = state.record(result.shell_state, env, args.persist_env, ctx.redactor)
        if note:
            notes.append(note)
    if notes:
        output["note"] = "; ".join(notes)
    if result.oom:
        msg = (
            f"the command ran out of memory (session limit {ctx.limits.memory_bytes} bytes) "
            "and was killed; use less memory or ask for a larger session"
        )
        raise LimitExceeded(msg, output)
    if output["timed_out"]:
        raise CallTimeout(timeout_message(result, request, output), output)
    return output


def timeout_message(
    result: protocol.ExecResult, request: protocol.Exec, output: dict[str, Any]
) -> str:
    if output["reason"] == "deadline":
        return (
            f"the command did not finish within {request.timeout_s:g} s; "
            "it and every process it started were killed"
        )
    silent = f"the command printed nothing for {request.idle_timeout_s:g} s"
    if "process_id" in output:
        return (
            f"{silent}; is it waiting for input (see the last lines of its output)? "
            f"It keeps running as background process {output['process_id']}: "
            "wait for it with process_output, stop it with process_kill, or rerun it "
            "with a larger idle_timeout_s if it is just quiet"
        )
    why = (
        "the session's background processes are at their maximum, so it"
        if result.background_cap_hit
        else "it"
    )
    return f"{silent}; {why} and every process it started were killed"


SHELL = Tool(
    name="shell",
    description=DESCRIPTION,
    arguments=ShellArgs,
    run=run_shell,
    read_only=False,
    resumable=True,
)
