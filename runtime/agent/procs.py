"""Starting and killing the processes of one call, inside the sandbox.

Each call gets a *subreaper*: a forked copy of the agent that stays root,
marks itself PR_SET_CHILD_SUBREAPER and starts the command as the sandbox
user. Processes that setsid or double-fork are re-parented to it rather than
to the agent, so it can always find and kill the whole tree of its call,
and only of its call. It reports the main process's exit status over a pipe
as soon as it is known, then keeps reaping background children until none
is left.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import signal
import struct
import time
from typing import Dict, List, Optional, Set, Tuple

PR_SET_CHILD_SUBREAPER = 36


@dataclasses.dataclass(frozen=True)
class Launch:
    """What a subreaper starts: `bash -c command` as uid:gid in cwd with env."""

    command: str
    cwd: str
    env: Dict[str, str]
    uid: int
    gid: int
    grace_s: float


# -- reports to the agent ------------------------------------------------------
# The subreaper (spawn.c or run_subreaper below) tells the agent what became
# of the command in fixed records: a type, then two ints. No string travels,
# so nothing a model chose (a cwd, a command) can change what a record says;
# the agent words the messages itself from what it asked for.
REPORT = struct.Struct("=Iii")
PID, STATUS, ERROR = 1, 2, 3
# ERROR records: (stage, errno). spawn.c numbers them the same way.
STAGE_SUBREAPER, STAGE_FORK, STAGE_USER, STAGE_CWD, STAGE_EXEC = 1, 2, 3, 4, 5
STAGES = {
    STAGE_SUBREAPER: "prctl(PR_SET_CHILD_SUBREAPER)",
    STAGE_FORK: "fork",
    STAGE_USER: "dropping to the sandbox user",
    STAGE_CWD: "cwd",
    STAGE_EXEC: "/bin/bash",
}


class ReportError(ValueError):
    """The subreaper sent bytes that are not a report."""


def encode_report(kind: int, a: int, b: int = 0) -> bytes:
    return REPORT.pack(kind, a, b)


def decode_reports(data: bytes) -> Tuple[List[Tuple[int, int, int]], bytes]:
    """Whole records in `data` (checked), and the bytes of one still arriving."""
    whole = len(data) - len(data) % REPORT.size
    records = [REPORT.unpack_from(data, at) for at in range(0, whole, REPORT.size)]
    for kind, a, b in records:
        if kind == PID and a > 0 and b == 0:
            continue
        if kind == STATUS and b == 0:
            continue
        if kind == ERROR and a in STAGES and b > 0:
            continue
        msg = f"unknown record (type {kind}, {a}, {b})"
        raise ReportError(msg)
    return records, data[whole:]


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


class KillRequested(Exception):
    """Raised by the subreaper's SIGTERM handler to leave a blocking wait."""


def descendants(root: int) -> Set[int]:
    """All live processes below `root`, read from /proc in one pass."""
    children: Dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: split after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(name))
    found: Set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _reap_nowait() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_tree(grace_s: float) -> None:
    """TERM everything below this process, then KILL until nothing is left."""
    me = os.getpid()
    for pid in descendants(me):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap_nowait()
        if not descendants(me):
            return
        time.sleep(0.01)
    # Killed processes cannot fork, and their children land on us: a few
    # passes converge even against a fork bomb.
    while True:
        left = descendants(me)
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap_nowait()
        time.sleep(0.002)
    _reap_nowait()


def _mark_oom_first() -> None:
    """Make this subreaper, and so everything it starts, the OOM killer's
    first choice, never the agent (a negative adj for the agent is refused
    by runc on some hosts). Done here rather than in a preexec_fn between
    fork and exec, which would cost a Python callback in the child per call;
    the largest process still goes first among equal adjs."""
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")


# The per-call subreaper in C (spawn.c), built by `make`; without it (or with
# TOOLRT_NATIVE_SPAWN=0) run_subreaper below does the same job from a fork
# of the agent, at the price of copying a Python process per call.
HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "toolrt-spawn")
NATIVE = os.environ.get("TOOLRT_NATIVE_SPAWN", "1") != "0" and os.access(HELPER, os.X_OK)


def spawn_native(launch: Launch, stdin_fd: int, out_w: int, err_w: int, status_w: int) -> int:
    """Start the C subreaper with posix_spawn (no copy of the agent); its pid."""
    grace_ms = str(int(launch.grace_s * 1000))
    argv = [HELPER, str(launch.uid), str(launch.gid), grace_ms, launch.cwd]
    argv += ["/bin/bash", "-c", launch.command]
    return os.posix_spawn(
        HELPER,
        argv,
        launch.env,
        file_actions=[
            (os.POSIX_SPAWN_DUP2, stdin_fd, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
            (os.POSIX_SPAWN_DUP2, status_w, 3),
        ],
        # Held until the helper takes SIGTERM with sigwaitinfo; Python's
        # ignored SIGPIPE/SIGXFSZ must not reach the command.
        setsigmask={signal.SIGTERM},
        setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
    )


def run_subreaper(
    launch: Launch,
    stdin_fd: int,
    out_w: int,
    err_w: int,
    status_w: int,
) -> None:
    """Body of the forked subreaper; never returns."""
    code = 0
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)

        def on_term(_signum: int, _frame: object) -> None:
            raise KillRequested

        signal.signal(signal.SIGTERM, on_term)
        # The agent forked us with SIGTERM blocked so that a kill sent this
        # early is held until the handler above can turn it into KillRequested.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        # Imported here, in the forked subreaper: with the C helper the agent
        # never needs them, and they cost every sandbox start-up time and memory.
        import ctypes
        import subprocess

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
        try:
            _mark_oom_first()
        except OSError:
            pass  # as spawn.c: a command the OOM killer prefers less is still a command
        try:
            # user/group/extra_groups: setgroups([]), setgid, setuid done by
            # _posixsubprocess in C, without the cost of a preexec_fn.
            proc = subprocess.Popen(
                ["/bin/bash", "-c", launch.command],
                stdin=stdin_fd,
                stdout=out_w,
                stderr=err_w,
                cwd=launch.cwd,
                env=launch.env,
                close_fds=True,
                start_new_session=True,
                user=launch.uid,
                group=launch.gid,
                extra_groups=[],
            )
        except KillRequested:
            raise
        except OSError as exc:
            # _posixsubprocess names the directory when chdir failed.
            stage = STAGE_CWD if exc.filename == launch.cwd else STAGE_EXEC
            _report(status_w, ERROR, stage, exc.errno or errno.EIO)
            os._exit(0)
        os.close(out_w)
        if err_w != out_w:
            os.close(err_w)
        if stdin_fd > 2:
            os.close(stdin_fd)
        _report(status_w, PID, proc.pid)
        try:
            while True:
                try:
                    pid, status = os.waitpid(-1, 0)
                except ChildProcessError:
                    break
                if pid == proc.pid:
                    _report(status_w, STATUS, status)
        except KillRequested:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            kill_tree(launch.grace_s)
    except KillRequested:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        kill_tree(launch.grace_s)
    except OSError as exc:
        # Say why (a call must not end as an unexplained SIGKILL).
        _report(status_w, ERROR, STAGE_SUBREAPER, exc.errno or errno.EIO)
        code = 1
    except BaseException:  # noqa: BLE001 - the subreaper must always exit, and say so
        _report(status_w, ERROR, STAGE_FORK, errno.EIO)
        code = 1
    os._exit(code)


def _report(fd: int, kind: int, a: int, b: int = 0) -> None:
    try:
        os.write(fd, encode_report(kind, a, b))
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
