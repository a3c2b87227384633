"""Pseudo-terminals for programs (Spawn with tty) and background commands
(Exec with tty): the master side stays with the agent, the slave becomes
the command's controlling terminal (its launcher takes it: spawn.c).

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import fcntl
import os
import struct
import termios
from typing import Tuple


def open_terminal(rows: int, cols: int) -> Tuple[int, int]:
    """A pseudo-terminal (master, slave), both close-on-exec, its window
    rows x cols when both are given."""
    master, slave = os.openpty()
    if rows > 0 and cols > 0:
        set_window(master, rows, cols)
    return master, slave


def set_window(fd: int, rows: int, cols: int) -> None:
    """A terminal's window size; the kernel signals SIGWINCH to its
    foreground process group when it changes."""
    size = struct.pack("HHHH", min(rows, 0xFFFF), min(cols, 0xFFFF), 0, 0)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, size)


def type_into(fd: int, data: bytes) -> int:
    """Write what the terminal takes now of `data` (non-blocking); how much."""
    written = 0
    while written < len(data):
        try:
            written += os.write(fd, data[written:])
        except (BlockingIOError, InterruptedError):
            break
    return written
