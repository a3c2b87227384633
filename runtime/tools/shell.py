"""`shell`: run a bash command in the session's sandbox."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runtime.errors import CallTimeout, LimitExceeded
from runtime.tools.base import Tool, ToolContext
from runtime.tools.files import checked_path
from runtime.tools.output import render_stream

# What every command sees before the session's and the call's own env: no
# pagers, no prompts, no terminal tricks (stdin is closed, there is no TTY).
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/workspace",
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
    "PYTHONUNBUFFERED": "1",
}

DESCRIPTION = """\
Run a bash command in this session's Linux sandbox (Debian, python3, pytest, \
git) and get its exit code, stdout and stderr.

Use it to build, run programs and scripts, inspect the system, use git, or \
anything without a dedicated tool. Prefer read_file/write_file/edit_file for \
file contents when they are available: they are exact and cheaper.

Limits: the sandbox has NO network (pip install, git clone, curl will fail). \
Commands run as an unprivileged user in /workspace (writable, size-capped); \
/tmp is writable too; the rest of the filesystem is read-only. stdin is \
closed: interactive prompts get end-of-file, so pass flags like -y or -m. \
Each call is limited by timeout_s (default and maximum set by the session); \
on timeout every process the command started is killed and you get TIMEOUT \
with the output so far. Output over the cap keeps its beginning and end with \
a marker saying how much was dropped. Background processes (`cmd &`) keep \
running until the session ends and do not hold the call open.\
"""


class ShellArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1, description="The bash command line to run.")
    cwd: str | None = Field(None, description="Absolute directory to run in. Default: /workspace.")
    timeout_s: float | None = Field(
        None,
        gt=0,
        description="Seconds before the command is killed (capped by the session's maximum).",
    )
    env: dict[str, str] | None = Field(
        None, description="Extra environment variables for this command only."
    )

    @field_validator("command")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        if "\x00" in value:
            msg = "must not contain NUL characters"
            raise ValueError(msg)
        return value

    @field_validator("timeout_s")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            msg = "must be a finite number of seconds"
            raise ValueError(msg)
        return value

    @field_validator("cwd")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or "\x00" in value):
            msg = "must be an absolute path such as /workspace/src"
            raise ValueError(msg)
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key, item in (value or {}).items():
            if not key or "=" in key or "\x00" in key or "\x00" in item:
                msg = f"environment variable {key!r}: names must be non-empty without '=' or NUL"
                raise ValueError(msg)
        return value


def command_env(session_env: dict[str, str], call_env: dict[str, str] | None) -> dict[str, str]:
    return {**BASE_ENV, **session_env, **(call_env or {})}


def shell_output(header: dict[str, Any], body: bytes) -> dict[str, Any]:
    """The agent's exit frame as DESIGN.md's `shell` output_json."""
    out, err = header["stdout"], header["stderr"]
    cut = out["head"] + out["tail"]
    stdout, bad_out = render_stream(body[: out["head"]], body[out["head"] : cut], out)
    err_body = body[cut:]
    stderr, bad_err = render_stream(err_body[: err["head"]], err_body[err["head"] :], err)
    output: dict[str, Any] = {
        "exit_code": header["exit_code"],
        "stdout": stdout,
        "stderr": stderr,
        "stdout_truncated": out["total"] > out["head"] + out["tail"],
        "stderr_truncated": err["total"] > err["head"] + err["tail"],
        "stdout_total_bytes": out["total"],
        "stderr_total_bytes": err["total"],
        "timed_out": header.get("killed") == "deadline",
    }
    if bad_out or bad_err:
        output["invalid_utf8_replaced"] = True
    return output


async def run_shell(ctx: ToolContext, args: ShellArgs) -> dict[str, Any]:
    timeout = min(args.timeout_s or ctx.limits.call_timeout_s, ctx.limits.call_timeout_s)
    if args.cwd is not None:
        await checked_path(ctx, args.cwd)  # the allowlist's read roots govern cwd
    spec = {
        "command": args.command,
        "cwd": args.cwd or "/workspace",
        "env": command_env(ctx.env, args.env),
        "timeout_s": timeout,
        "grace_s": ctx.kill_grace_s,
        "output_cap": ctx.limits.output_cap_bytes,
        "stream": ctx.on_output is not None,
        "stream_cap": ctx.stream_cap_bytes,
    }
    sink = ctx.on_output

    def on_event(frame: dict[str, Any], chunk: bytes) -> None:
        if sink is not None and frame.get("op") == "out":
            sink(str(frame.get("stream")), chunk)

    header, body = await ctx.agent("exec", spec, on_event=on_event if sink else None)
    output = shell_output(header, body)
    if header.get("oom"):
        msg = (
            f"the command ran out of memory (session limit {ctx.limits.memory_bytes} bytes) "
            "and was killed; use less memory or ask for a larger session"
        )
        raise LimitExceeded(msg, output)
    if output["timed_out"]:
        msg = (
            f"the command did not finish within {timeout:g} s; "
            "it and every process it started were killed"
        )
        raise CallTimeout(msg, output)
    return output


SHELL = Tool(
    name="shell",
    description=DESCRIPTION,
    arguments=ShellArgs,
    run=run_shell,
    read_only=False,
)
