"""`toolrt exec SESSION -- CMD...` and `toolrt run -- CMD...`: commands from a terminal.

Both stream the command's stdout and stderr live and exit with its exit
code, so they compose with shell scripts:

- the command's own exit code (128 + signal when it was killed);
- 124 when it outlived its timeout (like coreutils `timeout`);
- 125 when toolrt itself failed (daemon unreachable, session missing, ...);
- 130 on Ctrl-C (`run` still removes its session).

One argument after `--` is a shell command line (`'make && ./a.out | head'`);
several are one command with its arguments, quoted for bash.

`-i` streams stdin to the command and `-t` gives it a terminal (`toolrt run
-it -- bash`): both run it as a program (Exec, terminal.py) rather than as
the `shell` tool's call.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, BinaryIO

from runtime.cli import terminal
from runtime.cli.options import (
    add_session_options,
    command_fields,
    connect,
    parse_pair,
    session_fields,
)
from runtime.cli.terminal import EXIT_TIMEOUT, EXIT_TOOLRT

EXIT_INTERRUPTED = 130
# A run session's idle limit: if this CLI dies, nothing else will use it.
RUN_IDLE_SECONDS = 60


def command_line(words: list[str]) -> str:
    return words[0] if len(words) == 1 else shlex.join(words)


def _warn(message: str) -> None:
    print(f"toolrt: {message}", file=sys.stderr, flush=True)


def stream_command(client: Any, session_id: str, args: argparse.Namespace) -> int:
    """Run `args.command` in the session, relaying output live; its exit code."""
    arguments = {"command": command_line(args.command), **command_fields(args)}
    sinks: dict[str, BinaryIO] = {"stdout": sys.stdout.buffer, "stderr": sys.stderr.buffer}
    relayed = {"stdout": 0, "stderr": 0}
    result = None
    for event in client.stream(session_id, "shell", arguments):
        if isinstance(event, tuple):
            name, chunk = event
            sinks[name].write(chunk)
            sinks[name].flush()
            relayed[name] += len(chunk)
        else:
            result = event
    if result is None:
        _warn("the daemon ended the call without a result")
        return EXIT_TOOLRT
    for name in relayed:
        total = int(result.output.get(f"{name}_total_bytes", 0))
        if total > relayed[name]:
            _warn(f"live {name} stopped after {relayed[name]} of {total} bytes (stream cap)")
    if result.ok:
        return int(result.output["exit_code"])
    _warn(f"{result.error_code}: {result.error_message}")
    if result.error_code == "TIMEOUT":
        return EXIT_TIMEOUT
    exit_code = result.output.get("exit_code")
    return int(exit_code) if isinstance(exit_code, int) and exit_code else EXIT_TOOLRT


def run_command(client: Any, session_id: str, args: argparse.Namespace) -> int:
    """The command's exit code: run as a program with -i or -t, else as a shell call."""
    if args.interactive or args.tty:
        return terminal.run_interactive(client, session_id, args)
    return stream_command(client, session_id, args)


def _exec(args: argparse.Namespace) -> int:
    from runtime.client import ToolrtRpcError

    if args.tty and not os.isatty(sys.stdin.fileno()):
        _warn(terminal.no_terminal_message(args.command))
        return EXIT_TOOLRT
    try:
        with connect(args) as client:
            return run_command(client, args.session_id, args)
    except ToolrtRpcError as exc:
        _warn(str(exc))
        return EXIT_TOOLRT


def _terminate(signum: int, frame: FrameType | None) -> None:
    # SIGTERM unwinds like Ctrl-C, so the session is closed on the way out.
    raise KeyboardInterrupt


def _run(args: argparse.Namespace) -> int:
    from runtime.client import ToolrtRpcError

    if args.tty and not os.isatty(sys.stdin.fileno()):
        _warn(terminal.no_terminal_message(args.command))
        return EXIT_TOOLRT
    fields = session_fields(args)
    fields["idle_seconds"] = fields["idle_seconds"] or RUN_IDLE_SECONDS
    if args.timeout:
        # The session's per-call ceiling must let the command run that long.
        fields.setdefault("limits", {})["call_timeout_s"] = args.timeout
    previous_term: Callable[[int, FrameType | None], Any] | int | None = signal.signal(
        signal.SIGTERM, _terminate
    )
    # Also when started with SIGINT ignored (a background job of a script
    # inherits that): an INT sent to it still removes the session.
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with connect(args) as client:
            session = client.create_session(**fields)
            try:
                return run_command(client, session.id, args)
            finally:
                try:
                    client.close_session(session.id)
                except ToolrtRpcError as exc:
                    _warn(f"closing session {session.id}: {exc}")
    except ToolrtRpcError as exc:
        _warn(str(exc))
        return EXIT_TOOLRT
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous_int)


def _command_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout", type=float, default=0, help="seconds before the command is killed (exit 124)"
    )
    parser.add_argument("--cwd", default="", help="directory to run in (default /workspace)")
    parser.add_argument(
        "-e",
        "--call-env",
        action="append",
        default=[],
        type=parse_pair,
        metavar="KEY=VALUE",
        help="environment of this command only (repeatable)",
    )
    parser.add_argument(
        "-i", "--interactive", action="store_true", help="stream stdin to the command"
    )
    parser.add_argument(
        "-t",
        "--tty",
        action="store_true",
        help="give the command a terminal, this one in raw mode (needs a terminal on stdin)",
    )
    parser.add_argument("command", nargs="+", help="after --: the command and its arguments")


def add_commands(sub: Any, client_parser: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """Register `exec` and `run` on the `toolrt` subcommand parser."""
    exec_ = client_parser("exec", "run a command in a session: toolrt exec SESSION -- CMD...")
    exec_.add_argument("session_id")
    _command_options(exec_)
    exec_.set_defaults(func=_exec)

    run = client_parser(
        "run", "run a command in a throwaway session, then remove it: toolrt run -- CMD..."
    )
    add_session_options(run)
    _command_options(run)
    run.set_defaults(func=_run)
