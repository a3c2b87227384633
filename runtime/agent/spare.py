"""A shell started ahead of the session's next call.

Starting a command costs the launcher and bash's start-up, on the call's
path. While the session is idle (no call running) the agent starts the next
call's shell ahead, exactly as procs.py starts any command: own session, the
next call's group, the sandbox user, the syscall filter, the cwd of the
latest call and the session's own environment (Exec.spare_env: never a
call's one-call `env`), its stdout and stderr pipes, stdin from /dev/null.
That bash runs BOOT: it blocks reading one byte from GO_FD, then reads its
script from SCRIPT_FD and evals it.

A call uses the spare only when nothing it relies on can differ from a shell
started for it: the same cwd (the same directory, owner and mode as when the
spare started), an environment that is the spare's or differs from it only
in plain variables (set or unset by the script's preamble, on the command's
first line so bash's line numbers stay the command's), no stdin, no NUL in
the command. Anything else, and any doubt (the spare died or was stopped,
its launcher failed, something wrote into its pipes, its script could have
been changed), starts the call's shell the usual way; so does a call that
comes while the spare is still starting (it is left for a later call: no
call ever waits for one). The preamble also
gives the command what its own start would have: stderr on stdout when
merged, no shell-state channel when the call reports none. The one
difference a command can see: a syntax error is reported as
`bash: eval: line N` rather than `bash: -c: line N`.

Other processes of the sandbox user can reach the spare's descriptors
through /proc/<pid>/fd. The go byte travels on a socket (which cannot be
reopened that way); the script in a memfd (a regular file, which bash reads
in a few calls rather than a byte at a time) that is sealed and read back
before the go byte; output pipes that held anything before the call are not
used. (A process allowed to ptrace the sandbox user's processes can change
any command's run, a spare's or not.)

One spare per session, never while memory or pids are short (healing.py),
never without the C launcher, off with TOOLRT_SPARE_SHELL=0.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import socket
import time
from typing import Any, Dict, List, Optional, Tuple

from . import procs, records
from .state import StateChannel

GO_FD, SCRIPT_FD = 60, 61
ENABLED = os.environ.get("TOOLRT_SPARE_SHELL", "1") != "0"
BOOT = (
    f"IFS= builtin read -r -n 1 -u {GO_FD} __toolrt_g || builtin exit 0; "
    f"IFS= builtin read -r -d '' -u {SCRIPT_FD} __toolrt_s; "
    f"exec {GO_FD}<&- {SCRIPT_FD}<&-; "
    'builtin eval "$__toolrt_s"'
)
# Variables a preamble may set or unset and get what bash's own start with
# them in its environment would have given. Bash reads the others at start-up
# (BASH_ENV, SHELLOPTS, exported functions...), keeps them read-only (UID...)
# or sets them itself (PWD, SHLVL...): a call differing in those starts its
# own shell.
PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
STARTUP_VARS = frozenset(
    {
        "ENV", "SHELLOPTS", "SHLVL", "PWD", "OLDPWD", "IFS", "PS4", "POSIXLY_CORRECT",
        "UID", "EUID", "PPID", "GROUPS", "HOSTNAME", "HOSTTYPE", "OSTYPE", "MACHTYPE",
        "RANDOM", "SRANDOM", "SECONDS", "LINENO", "FUNCNAME", "HISTCMD", "OPTIND",
        "OPTERR", "TMOUT", "COLUMNS", "LINES", "DIRSTACK", "PIPESTATUS", "CDPATH",
        "GLOBIGNORE", "TERM", "_",
    }
)  # fmt: skip


def plain(name: str) -> bool:
    return bool(PLAIN.match(name)) and name not in STARTUP_VARS and not name.startswith("BASH")


def quote(value: str) -> str:
    """`value` as one ANSI-C quoted word on one line ($'...')."""
    out = []
    for ch in value:
        if ch == "\\" or ch == "'":
            out.append("\\" + ch)
        elif ch < " " or ch == "\x7f":
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def env_preamble(had: Dict[str, str], wanted: Dict[str, str]) -> Optional[str]:
    """Builtins that turn environment `had` into `wanted`, or None when a
    variable that differs is not plain."""
    parts: List[str] = []
    for name in had.keys() - wanted.keys():
        if not plain(name):
            return None
        parts.append(f"builtin unset -v {name}; ")
    for name, value in wanted.items():
        if had.get(name) != value:
            if not plain(name):
                return None
            parts.append(f"builtin export {name}={quote(value)}; ")
    return "".join(sorted(parts))


def directory_id(path: str) -> Optional[Tuple[int, ...]]:
    """What decides whether a shell may be in `path`: which directory it is,
    its owner and mode. None when it cannot be looked at."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino, st.st_mode, st.st_uid, st.st_gid)


@records.record
class Spare:
    """One started shell waiting for its script, and the agent's ends."""

    pid: int
    group: int
    cwd: str
    cwd_id: Tuple[int, ...]
    env: Dict[str, str]
    out_r: int
    err_r: int
    report_r: int
    go: socket.socket
    script: int
    state: StateChannel
    dead: bool = False
    born: float = 0.0  # time.monotonic() at its start

    def agent_fds(self) -> List[int]:
        return [self.out_r, self.err_r, self.report_r, self.script]


@records.record(frozen=True)
class Plan:
    """Where and with what environment the next spare starts: the latest
    call's cwd (as its shell left it) and environment."""

    cwd: str
    env: Dict[str, str]


def functions_in(env: Dict[str, str]) -> bool:
    """Whether `env` exports shell functions: one named `exec` or `eval`
    would run in the spare's place (`builtin exec` cannot redirect the shell)."""
    return any(name.startswith("BASH_FUNC_") for name in env)


def start(plan: Plan, group: int, uid: int, gid: int) -> Optional[Spare]:
    """A spare as `plan` says, or None when its directory cannot be looked
    at or its environment exports functions."""
    cwd_id = directory_id(plan.cwd)
    if cwd_id is None or functions_in(plan.env):
        return None
    theirs: List[int] = []
    ours: List[int] = []
    closers: List[Any] = []
    try:
        stdin = procs.above_floor(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        theirs.append(stdin)
        for _ in range(3):
            r, w = os.pipe2(os.O_CLOEXEC)
            ours.append(r)
            theirs.append(procs.above_floor(w))
        go, go_peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        closers.append(go)
        theirs.append(procs.above_floor(go_peer.detach()))
        flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
        script = procs.above_floor(os.memfd_create("toolrt-call", flags))
        ours.append(script)
        state = StateChannel()
        closers.append(state)
        theirs.append(state.peer)
        launch = procs.Launch(
            command=BOOT,
            cwd=plan.cwd,
            env=plan.env,
            uid=uid,
            gid=gid,
            group=group,
            stdin=stdin,
            stdout=theirs[1],
            stderr=theirs[2],
            report=theirs[3],
            state=state.peer,
            extra=((theirs[4], GO_FD), (script, SCRIPT_FD)),
        )
        pid = procs.spawn_native(launch)
    except (OSError, ValueError):
        for fd in ours + theirs:
            os.close(fd)
        for closer in closers:
            closer.close()
        return None
    for fd in theirs:
        os.close(fd)
    out_r, err_r, report_r = ours[:3]
    os.set_blocking(report_r, False)
    for fd in (out_r, err_r):
        os.set_blocking(fd, False)
    born = time.monotonic()
    env = dict(plan.env)
    return Spare(
        pid, group, plan.cwd, cwd_id, env, out_r, err_r, report_r, go, script, state, born=born
    )


# A launcher that has not exec'd bash by then never will (it was stopped):
# its spare is discarded rather than waited for.
STALE_S = 5.0


def ready(spare: Spare) -> Optional[bool]:
    """Whether the spare's bash runs and waits: its launcher's report pipe
    closed empty (the launcher exec'd bash), and it is neither stopped nor
    dead (another process of the sandbox user may have signalled it). None
    while its launcher is still at work: a call never waits for a spare
    (under gVisor a start takes tens of milliseconds)."""
    data = b""
    while len(data) <= procs.REPORT_MAX:
        try:
            chunk = os.read(spare.report_r, procs.REPORT_MAX)
        except (BlockingIOError, InterruptedError):
            starting = not data and time.monotonic() - spare.born < STALE_S
            return None if starting else False
        except OSError:
            return False
        if not chunk:
            return not data and waiting(spare.pid)
        data += chunk
    return False


def waiting(pid: int) -> bool:
    """Whether `pid` is a live process that is not stopped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    state = stat[stat.rfind(b")") + 2 :][:1]
    return state not in (b"T", b"t", b"Z", b"X", b"x", b"")


def script_for(
    spare: Spare, env: Dict[str, str], command: str, merge: bool, state: bool
) -> Optional[bytes]:
    """What the spare evals to become the call's shell, or None when it cannot."""
    if "\0" in command or functions_in(env):
        return None
    adjust = env_preamble(spare.env, env)
    if adjust is None:
        return None
    preamble = "builtin unset -v __toolrt_g __toolrt_s; "
    if merge:
        preamble += "exec 2>&1; "
    if not state:
        preamble += f"exec {procs.STATE_FD}>&-; "
    return (preamble + adjust + command).encode("utf-8", "surrogateescape")


def untouched(spare: Spare) -> bool:
    """Whether nothing was written into the spare's output pipes while it
    waited: it writes nothing before its script, so any byte there came
    from another process (through /proc/<pid>/fd) and would pass for the
    call's output."""
    for fd in (spare.out_r, spare.err_r):
        try:
            if os.read(fd, 1):
                return False
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            return False
    return True


def release(spare: Spare, script: bytes) -> bool:
    """Give the spare its script; False when it is gone or the script could
    have been changed (nothing was run then).

    Other processes of the sandbox user can reopen the memfd through
    /proc/<pid>/fd: the script is written, sealed against any change, then
    read back; only then does the go byte, on a socket nobody can reopen,
    let the spare read it."""
    seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
    try:
        os.ftruncate(spare.script, 0)
        os.pwrite(spare.script, script, 0)
        fcntl.fcntl(spare.script, fcntl.F_ADD_SEALS, seals)
        if os.pread(spare.script, len(script) + 1, 0) != script:
            return False
        spare.go.send(b"g")
    except OSError:
        return False
    return True


def discard(spare: Spare) -> None:
    """Kill an unused spare (the agent reaps it, PID 1) and close our ends."""
    if not spare.dead:
        try:
            os.kill(spare.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # (gVisor may refuse it mid-exec: the closed go socket ends it too)
    close(spare)
    spare.state.close()


def close(spare: Spare) -> None:
    """Close the agent's ends that only the spare's start needed."""
    for fd in spare.agent_fds():
        try:
            os.close(fd)
        except OSError:
            pass
    spare.go.close()
