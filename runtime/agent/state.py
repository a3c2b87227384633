"""The state a shell call leaves: its final directory, and its exports.

The command's shell reports them in an EXIT trap, so a `cd` or `export` can
outlive its call without touching its output or exit code. The report goes
over a socket pair the agent makes per call: bash finds its end at fd
procs.STATE_FD, and the agent reads the other with SO_PASSCRED, so the kernel
names the sender of every record. Only records sent by the call's main
process (bash itself, not its children, not other calls' leftovers) count;
there is no path to find or open (a socket cannot be reopened through
/proc/<pid>/fd, and nothing of it is in a command line or the environment),
and the agent reads what is queued before it reaps the shell, while no
other process can have its pid. A report that is not whole and well formed
is ignored, and the result says so.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import selectors
import socket
import struct
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from . import procs, protocol

if TYPE_CHECKING:
    from .calls import Call
    from .redact import Redactor

# Variables bash itself sets: never worth persisting.
SHELL_OWN_VARS = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})
# Small enough that the report, escaped into a frame's JSON header (up to six
# bytes per byte), stays under protocol.MAX_HEADER.
STATE_CAP = 128 * 1024
RECORD_MAX = 65536
CREDS = struct.Struct("=iII")  # struct ucred: pid, uid, gid

# The report: NUL-terminated items. `pwd -P` ends the directory with a
# newline (a directory name cannot hold a NUL); env entries come between
# ENV and ENV-END, as /usr/bin/env -0 printed them and the shell relayed them.
MAGIC, ENV, ENV_END, END = b"toolrt-state-1", b"ENV", b"ENV-END", b"END"


def wrap_command(command: str, report: bool, pipefail: bool, report_env: bool) -> str:
    """`command` preceded, on its own first line, by the state trap.

    The prelude shares the command's first line so bash's error messages
    keep their line numbers. The trap leaves `$?` alone (bash exits with the
    status the command had) and writes nowhere the command's output goes.
    Every record must come from the shell itself: env's output is relayed
    through it, not written by env.
    """
    prelude = ""
    if report:
        fd = procs.STATE_FD
        env = ""
        if report_env:
            env = (
                "builtin printf 'ENV\\0'; "
                "while IFS= builtin read -r -d '' __toolrt_v; do "
                "builtin printf '%s\\0' \"$__toolrt_v\"; done "
                "< <(/usr/bin/env -0 && builtin printf 'ENV-END\\0'); "
            )
        dump = (
            f"builtin set +eu; [[ -S /dev/fd/{fd} ]] && {{ "
            "builtin printf 'toolrt-state-1\\0'; builtin pwd -P; builtin printf '\\0'; "
            f"{env}builtin printf 'END\\0'; }} >&{fd}"
        )
        prelude = f"builtin trap {_quote(f'{{ {dump}; }} 2>/dev/null')} EXIT; "
    if pipefail:
        prelude += "set -o pipefail; "
    return prelude + command


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


class Malformed(ValueError):
    """The shell's report is not whole or not well formed."""


def parse_report(data: bytes, with_env: bool) -> Tuple[protocol.ShellReport, str]:
    """The report's bytes → the directory (and env); a note when the env
    had to be left out. Malformed when it is not what the trap writes."""
    items = data.split(b"\0")
    if len(items) < 4 or items[0] != MAGIC or items[-1] != b"" or items[-2] != END:
        msg = "not a whole report"
        raise Malformed(msg)
    where = items[1]
    if where and not (where.startswith(b"/") and where.endswith(b"\n")):
        msg = "the directory is not an absolute path"
        raise Malformed(msg)
    report = protocol.ShellReport(cwd=where[:-1].decode("utf-8", "replace"))
    rest = items[2:-2]
    if not with_env:
        if rest:
            msg = "items after the directory"
            raise Malformed(msg)
        return report, ""
    if not rest or rest[0] != ENV or rest.count(ENV_END) > 1:
        msg = "no environment section"
        raise Malformed(msg)
    if rest[-1] != ENV_END:
        # env could not run (no process left to start?): keep the directory.
        return report, "the shell could not list its exports; they were not kept"
    report.env = _environment(rest[1:-1])
    return report, ""


def _environment(entries: List[bytes]) -> Dict[str, str]:
    env: Dict[str, str] = {}
    for item in entries:
        name, eq, value = item.partition(b"=")
        if not eq or not name:
            msg = "an environment entry without a name"
            raise Malformed(msg)
        try:
            key, text = name.decode(), value.decode()
        except UnicodeDecodeError:
            continue  # toolrt's env is text; such a variable cannot be kept
        if key not in SHELL_OWN_VARS:
            env[key] = text
    return env


class StateChannel:
    """The agent's end of one call's state socket, and what it received."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        ours.setblocking(False)
        self.sock = ours
        # Bash's end, above procs.FD_FLOOR; the launcher puts it at STATE_FD.
        self.peer = procs.above_floor(theirs.detach())
        self.shell_pid = 0
        # Watched by the agent's selector until every writer is gone.
        self.registered = False
        self.eof = False
        self.data = bytearray()
        self.too_large = False
        self.foreign: Dict[int, int] = {}  # sender pid → bytes ignored

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self, most: int = 64) -> None:
        """Take up to `most` queued records: the shell's are kept, others
        counted. (Bounded: a process that floods the socket gets no more of
        the agent's time than its own.)"""
        space = socket.CMSG_SPACE(CREDS.size)
        for _ in range(most):
            try:
                data, ancillary, flags, _ = self.sock.recvmsg(RECORD_MAX, space)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data, ancillary, flags = b"", [], 0
            pid = -1
            for level, kind, raw in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = CREDS.unpack_from(raw)[0]
            # Every writer is gone: no data, and no sender (gVisor names pid 0).
            if not data and pid <= 0:
                self.eof = True
                return
            if pid != self.shell_pid or not self.shell_pid:
                self.foreign[pid] = self.foreign.get(pid, 0) + len(data)
            elif flags & socket.MSG_TRUNC or len(self.data) + len(data) > STATE_CAP:
                self.too_large = True
            else:
                self.data += data

    def close(self) -> None:
        self.sock.close()

    def outcome(self, with_env: bool) -> Tuple[Optional[protocol.ShellReport], List[str]]:
        """What the shell reported, if it reported anything whole; notes."""
        notes = []
        if self.foreign:
            pids = ", ".join(str(p) for p in sorted(self.foreign))
            notes.append(
                f"ignored {sum(self.foreign.values())} bytes sent to this call's shell-state "
                f"channel by other processes (pid {pids}): only the command's shell "
                "reports its directory and exports"
            )
        if self.too_large:
            notes.append(
                f"the shell's exports exceed {STATE_CAP} bytes; its directory and exports "
                "were not kept"
            )
            return None, notes
        if not self.data:
            return None, notes  # no report: an exec'd or killed shell, a replaced trap
        try:
            report, note = parse_report(bytes(self.data), with_env)
        except Malformed as exc:
            notes.append(
                f"the shell's state report was malformed ({exc}); its directory and exports "
                "were not kept"
            )
            return None, notes
        if note:
            notes.append(note)
        return report, notes


class StateOps:
    """The agent's methods for shell state; a mixin of `loop.Agent`."""

    sel: selectors.BaseSelector
    redactor: Redactor

    def wrap(self, call: Call) -> None:
        """Prefix the command with its options and the state-reporting trap,
        and make the channel the trap reports to."""
        request = call.request
        if request.report_state:
            call.state = StateChannel()
            self.sel.register(call.state.fileno(), selectors.EVENT_READ, ("state", call))
            call.state.registered = True
        call.command = wrap_command(
            request.command, call.state is not None, request.pipefail, request.report_env
        )

    def read_state(self, call: Call, most: int = 64) -> None:
        channel = call.state
        if channel is None:
            return
        channel.read(most)
        if channel.eof and channel.registered:
            self.sel.unregister(channel.fileno())
            channel.registered = False

    def settle_state(self, call: Call) -> None:
        """Take what the shell reported (its process is gone, or the call is
        over) and close the channel; later writers get an error, not a wait."""
        channel = call.state
        if channel is None:
            return
        # Everything the shell sent is queued by now; the queue holds a few
        # hundred records at most, so this many reads empty it.
        self.read_state(call, most=4096)
        if channel.registered:
            self.sel.unregister(channel.fileno())
        channel.close()
        call.state = None
        if call.status is not None:
            call.shell_state, notes = channel.outcome(call.request.report_env)
            call.notes += notes
            if call.shell_state is not None and call.shell_state.env is not None:
                # The daemon keeps exports: references to secrets, never values.
                call.shell_state.env, notes = self.redactor.references(call.shell_state.env)
                call.notes += notes
