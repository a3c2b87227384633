"""`toolrt exec -it` and `toolrt run -it`: a program in the sandbox on this terminal.

With `-t` the program gets a terminal in the sandbox (Exec with `tty`) the
size of this one, and this terminal goes raw while it runs: every key,
Ctrl-C included, goes to the program, and a resize here (SIGWINCH) resizes
it there. Its exit code is toolrt's (124 when it outlived its timeout).
`-t` without a terminal on stdin is refused (exit 125), as `docker run -t`
refuses: there is nothing to put in raw mode, and a program driven from a
pipe wants `-i` alone, which streams stdin to it without a terminal.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import termios
import threading
import tty
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, BinaryIO

from runtime.cli.options import command_fields

EXIT_TIMEOUT = 124
EXIT_TOOLRT = 125
# Bytes read from stdin at a time (a keystroke, or a pasted block).
READ_BYTES = 65536


def program_fields(words: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Exec's fields: one word is a command line for /bin/sh -c, several an argv."""
    program: dict[str, Any] = {"argv": words}
    if len(words) == 1:
        program = {"argv": None, "command": words[0]}
    return {**program, **command_fields(args)}


def window_size(fd: int) -> tuple[int, int]:
    """(rows, cols) of the terminal at `fd`."""
    size = os.get_terminal_size(fd)
    return size.lines, size.columns


@contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    """The terminal at `fd` raw (keys pass through unread), restored after."""
    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextmanager
def resizes_sent(stream: Any, fd: int) -> Iterator[None]:
    """While it runs, this terminal's SIGWINCH resizes the program's."""

    def on_winch(signum: int, frame: FrameType | None) -> None:
        stream.resize(*window_size(fd))

    previous = signal.signal(signal.SIGWINCH, on_winch)
    try:
        yield
    finally:
        signal.signal(signal.SIGWINCH, previous)


def pump_stdin(stream: Any, fd: int) -> None:
    """Send what arrives on `fd` to the program, then end its input."""
    while True:
        try:
            data = os.read(fd, READ_BYTES)
        except OSError:
            data = b""
        if not data:
            stream.close_stdin()
            return
        stream.write(data)


def relay_events(stream: Any) -> int:
    """Write the program's output here as it comes; its exit code."""
    sinks: dict[str, BinaryIO] = {"stdout": sys.stdout.buffer, "stderr": sys.stderr.buffer}
    for kind, value in stream.events():
        if kind in sinks:
            sinks[kind].write(value)
            sinks[kind].flush()
        elif kind == "exit":
            return EXIT_TIMEOUT if value.timed_out else int(value.exit_code)
    return EXIT_TOOLRT


def run_interactive(client: Any, session_id: str, args: argparse.Namespace) -> int:
    """Run `args.command` with stdin streamed to it (-i), under a terminal
    (-t, which the caller checked stdin is); its exit code."""
    stdin = sys.stdin.fileno()
    fields = program_fields(args.command, args)
    if args.tty:
        fields.update(tty=True, size=window_size(stdin))
    with client.exec_stream(session_id, **fields) as stream:
        threading.Thread(target=pump_stdin, args=(stream, stdin), daemon=True).start()
        if not args.tty:
            return relay_events(stream)
        with raw_mode(stdin), resizes_sent(stream, stdin):
            return relay_events(stream)


def no_terminal_message(words: list[str]) -> str:
    return (
        f"-t needs a terminal on stdin, and stdin is not one: run {shlex.join(words)[:80]!r} "
        "with -i alone to stream stdin to it"
    )
