"""Starting a call's command inside the sandbox.

The agent (PID 1, root) starts each command through a launcher: the static C
helper (spawn.c) started with posix_spawn, or a fork of the agent when the
helper is missing. The launcher puts itself in a new session, takes the
call's group (tracker.py) as its only supplementary group, drops to the
sandbox user, enters the cwd and execs bash. So the agent is the parent of
every command and, as PID 1, of every orphan: it reads each main process's
exit status itself and reaps the rest.

The launcher's only message is why it could not exec: one fixed record
(type, then two ints) on a close-on-exec pipe, which closes empty when bash
starts. No string travels, so nothing a model chose (a cwd, a command) can
change what the record says; the agent words the message itself.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import struct
import termios
from typing import Dict, Optional, Tuple

from . import records, seccomp, users

REPORT = struct.Struct("=Iii")
ERROR = 1
# ERROR records: (stage, errno). spawn.c numbers them the same way.
STAGE_SETUP, STAGE_USER, STAGE_CWD, STAGE_EXEC, STAGE_FILTER = 1, 2, 3, 4, 5
STAGES = {
    STAGE_SETUP: "preparing the command's process",
    STAGE_USER: "dropping to the sandbox user",
    STAGE_CWD: "cwd",
    STAGE_EXEC: "/bin/bash",
    STAGE_FILTER: "installing the syscall filter",
}
# A launcher writes one record; more than this before end-of-file is garbage.
REPORT_MAX = 4 * REPORT.size

# Where bash finds the call's shell-state channel (background.py); every
# descriptor the launcher receives is moved above it first, so that no dup2
# lands on a descriptor still to be moved.
STATE_FD = 63
FD_FLOOR = 64


class ReportError(ValueError):
    """The launcher sent bytes that are not a report."""


def encode_report(stage: int, err: int) -> bytes:
    return REPORT.pack(ERROR, stage, err)


def decode_report(data: bytes) -> Optional[Tuple[int, int]]:
    """All a launcher wrote, read to its end: None when the command started,
    (stage, errno) when it could not; ReportError for anything else."""
    if not data:
        return None
    if len(data) == REPORT.size:
        kind, stage, err = REPORT.unpack(data)
        if kind == ERROR and stage in STAGES and err > 0:
            return stage, err
    msg = f"{len(data)} bytes that are not one known record ({data[:REPORT_MAX]!r})"
    raise ReportError(msg)


def failure_of_spawn(stage: int, err: int, cwd: str) -> Tuple[str, str]:
    """(agent error code, message) for a command that could not start."""
    what = STAGES[stage]
    if stage == STAGE_CWD:
        shown = cwd if len(cwd) <= 300 else cwd[:300] + "..."
        what = f"cwd {shown}"
    if err in (errno.EAGAIN, errno.ENOMEM):
        code = "LIMIT_EXCEEDED"
    elif err in (errno.ENOENT, errno.ENOTDIR):
        code = "NOT_FOUND"
    elif stage == STAGE_CWD and err in (errno.EACCES, errno.EPERM, errno.ELOOP):
        code = "PATH_DENIED"
    elif err in (errno.E2BIG, errno.ENAMETOOLONG):
        code = "INVALID_ARGUMENTS"
    else:
        code = "INTERNAL"
    return code, f"{what}: {os.strerror(err)}"


@records.record(frozen=True)
class Launch:
    """`bash -c command` as uid:gid with `group` as its only supplementary
    group, in cwd with env, under the syscall filter (seccomp.py); its
    descriptors, all at or above FD_FLOOR."""

    command: str
    cwd: str
    env: Dict[str, str]
    uid: int
    gid: int
    group: int
    stdin: int
    stdout: int
    stderr: int
    report: int
    # The shell-state channel (STATE_FD in bash), or -1.
    state: int = -1
    # More descriptors for bash: (ours, where bash finds it), below STATE_FD.
    extra: Tuple[Tuple[int, int], ...] = ()
    # A program to run instead of `bash -c command` (argv[0] without a
    # slash is looked up in env's PATH): the Spawn operation's.
    argv: Tuple[str, ...] = ()
    # Root's capabilities (users.py), when uid is 0; anyone else has none.
    capabilities: int = 0

    def program(self) -> Tuple[str, ...]:
        return self.argv or ("/bin/bash", "-c", self.command)


def above_floor(fd: int) -> int:
    """`fd` moved to FD_FLOOR or above, close-on-exec (the original is closed)."""
    if fd >= FD_FLOOR:
        return fd
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, FD_FLOOR)
    os.close(fd)
    return high


# Signals the agent ignores (loop.py): every catchable one whose default ends
# or stops a process, but those it handles (CHLD, USR1) or ignores anyway.
IGNORED_BY_AGENT = tuple(
    getattr(signal, name)
    for name in (
        "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE",
        "SIGUSR2", "SIGSEGV", "SIGALRM", "SIGTERM", "SIGSTKFLT", "SIGTSTP", "SIGTTIN",
        "SIGTTOU", "SIGXCPU", "SIGVTALRM", "SIGPROF", "SIGIO", "SIGPWR", "SIGSYS",
    )
    if hasattr(signal, name)
)  # fmt: skip
# What a command starts with at the default: Python ignores SIGPIPE and
# SIGXFSZ, the agent the rest; the command must not.
RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, *IGNORED_BY_AGENT)
# The launcher in C (spawn.c), built by `make`; without it (or with
# TOOLRT_NATIVE_SPAWN=0) spawn_fork below does the same from a fork of the
# agent, at the price of copying a Python process per call.
HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "toolrt-spawn")
NATIVE = os.environ.get("TOOLRT_NATIVE_SPAWN", "1") != "0" and os.access(HELPER, os.X_OK)
# posix_spawn errors that mean the helper itself cannot run here (a noexec
# mount, a missing or foreign binary), not that this command cannot.
HELPER_UNUSABLE = frozenset({errno.ENOENT, errno.EACCES, errno.EPERM, errno.ENOEXEC})
# Every command's syscall filter, built once (its hex for the helper).
FILTER = seccomp.program()
FILTER_HEX = FILTER.hex()


def spawn_native(launch: Launch) -> int:
    """Start the C launcher with posix_spawn (no copy of the agent); its pid,
    which becomes bash's."""
    who = users.Who(launch.uid, launch.gid, launch.capabilities)
    argv = [HELPER, FILTER_HEX, str(launch.group), who.launcher_uid(), str(launch.gid), launch.cwd]
    argv += launch.program()
    actions = [
        (os.POSIX_SPAWN_DUP2, launch.stdin, 0),
        (os.POSIX_SPAWN_DUP2, launch.stdout, 1),
        (os.POSIX_SPAWN_DUP2, launch.stderr, 2),
        (os.POSIX_SPAWN_DUP2, launch.report, 3),
    ]
    if launch.state >= 0:
        actions.append((os.POSIX_SPAWN_DUP2, launch.state, STATE_FD))
    actions += [(os.POSIX_SPAWN_DUP2, fd, target) for fd, target in launch.extra]
    # The helper runs with the command's environment: it is static, so no
    # LD_PRELOAD or the like reaches code that still runs as root.
    return os.posix_spawn(
        HELPER,
        argv,
        launch.env,
        file_actions=actions,
        setsigmask=(),
        setsigdef=RESET_SIGNALS,
    )


def spawn_fork(launch: Launch) -> int:
    """The same as spawn_native from a fork of the agent; the child's pid."""
    pid = os.fork()
    if pid:
        return pid
    stage = STAGE_SETUP
    try:
        signal.set_wakeup_fd(-1)
        for sig in (*RESET_SIGNALS, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        os.setsid()
        _mark_oom_first()
        moves = [(launch.stdin, 0), (launch.stdout, 1), (launch.stderr, 2)]
        if launch.state >= 0:
            moves.append((launch.state, STATE_FD))
        moves += list(launch.extra)
        for fd, target in moves:
            os.dup2(fd, target)
        if os.isatty(0):
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # as spawn.c: a Spawn's terminal
        stage = STAGE_USER
        os.setgroups([launch.group])
        os.setgid(launch.gid)
        os.setuid(launch.uid)
        if launch.uid == 0:
            # Root keeps only its session's capabilities; no-new-privileges
            # keeps the exec from handing it the bounding set.
            users.drop_to(launch.capabilities)
        stage = STAGE_CWD
        os.chdir(launch.cwd)
        stage = STAGE_FILTER
        seccomp.install(FILTER)
        stage = STAGE_EXEC
        program = launch.program()
        os.execvpe(program[0], list(program), launch.env)
    except OSError as exc:
        _report(launch.report, stage, exc.errno or errno.EIO)
    except BaseException:  # noqa: BLE001 - the child must exit, and say why
        _report(launch.report, STAGE_SETUP, errno.EIO)
    finally:
        os._exit(127)
    return 0  # not reached: for the type checker


def _mark_oom_first() -> None:
    """Make the command the OOM killer's first choice, never the agent (a
    negative adj for the agent is refused by runc on some hosts); raising
    it is always allowed, and a command without it is still a command."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def _report(fd: int, stage: int, err: int) -> None:
    try:
        os.write(fd, encode_report(stage, err))
    except OSError:
        pass


def exit_code_of(status: int) -> int:
    """Shell convention: 128 + signal for a killed process."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def oom_kills() -> Optional[int]:
    """The cgroup's OOM-kill counter (v1 or v2), or None when unreadable."""
    for path in ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"):
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except OSError:
            continue
    return None
