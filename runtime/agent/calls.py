"""The `exec` and `cancel` operations: commands, their output and their end.

Each command runs as the sandbox user under a per-call subreaper (procs.py);
the agent watches its pipes, its deadline and its silence on the one
selector loop (loop.py), and answers with exactly one ExecResult.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import errno
import fcntl
import os
import selectors
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from . import procs, protocol
from .background import Proc, Registry
from .capture import READ_CHUNK, Capture
from .ops import operation

if TYPE_CHECKING:
    from .loop import Agent

SANDBOX_UID = int(os.environ.get("TOOLRT_SANDBOX_UID", "1000"))
SANDBOX_GID = int(os.environ.get("TOOLRT_SANDBOX_GID", "1000"))


class Call:
    """One running command and everything the loop tracks for it."""

    def __init__(self, rid: int, request: protocol.Exec) -> None:
        self.rid = rid
        self.request = request
        # What bash runs: the user's command behind the state trap (background.wrap).
        self.command = request.command
        self.stream = request.stream
        self.stream_budget = request.stream_cap
        cap, head = request.output_cap, request.head_fraction
        self.captures: Dict[str, Capture] = {
            "stdout": Capture(cap, head),
            "stderr": Capture(cap, head),
        }
        self.reaper_pid = 0
        self.main_pid = 0
        self.status: Optional[int] = None
        # (stage, errno) when the command could not start (procs.ERROR).
        self.spawn_error: Optional[Tuple[int, int]] = None
        self.reaper_exited = False
        self.deadline = time.monotonic() + request.timeout_s
        self.hard_deadline: Optional[float] = None
        self.reason = ""  # why it was killed: "deadline", "cancelled", "shutdown"
        self.oom_before = procs.oom_kills()
        self.fds: Dict[int, str] = {}
        self.status_buf = b""  # part of a report record still arriving
        self.status_fd = -1
        self.done = False
        self.started = time.monotonic()
        # Silence detection: no output for idle_s → on_idle ("background" or "kill").
        self.idle_s = request.idle_timeout_s
        self.on_idle = request.on_idle
        self.idle_cap_hit = False
        self.last_output = self.started
        # `background` calls answer after a short settle time and never time out.
        self.settle_at: Optional[float] = None
        if request.background:
            self.settle_at = self.started + request.settle_s
            self.deadline = float("inf")
            self.idle_s = 0.0
        # The FIFO the command's EXIT trap reports its directory (and env) to.
        self.state_fd = -1
        self.state_path = ""
        self.state_buf = bytearray()
        self.shell_state: Optional[protocol.ShellReport] = None
        # Set once the call was answered but its processes kept running.
        self.proc: Optional[Proc] = None


@operation(protocol.Exec)
def op_exec(agent: Agent, rid: int, request: protocol.Exec, body: bytes) -> None:
    agent.start_call(rid, request, body)


@operation(protocol.Cancel)
def op_cancel(agent: Agent, rid: int, request: protocol.Cancel, body: bytes) -> None:
    call = agent.calls.get(request.target)
    if call is not None and not call.done:
        agent.kill(call, request.reason)
    agent.send(protocol.Cancelled(), rid)


class CallOps:
    """The agent's methods for running calls.

    A mixin of `loop.Agent`, kept here so the loop stays readable; it uses
    the agent's selector, `send` and `fail`, and background.BackgroundOps.
    """

    sel: selectors.BaseSelector
    calls: Dict[int, Call]
    by_reaper: Dict[int, Call]
    proto_in: int
    proto_out: int
    wake_r: int
    background: Registry

    if TYPE_CHECKING:

        def send(self, message: protocol.Message, rid: int, body: bytes = b"") -> None: ...
        def fail(self, rid: int, code: str, message: str) -> None: ...
        def wrap(self, call: Call) -> None: ...
        def settle_state(self, call: Call) -> None: ...
        def detach(self, call: Call, idle: bool) -> None: ...
        def proc_update(self, proc: Proc) -> None: ...
        def on_silence(self, call: Call) -> None: ...

    def start_call(self, rid: int, request: protocol.Exec, body: bytes) -> None:
        cap = request.max_background
        if request.background and not self.background.has_room(cap):
            self.fail(
                rid,
                protocol.LIMIT_EXCEEDED,
                f"{cap} background processes are already running (the session's maximum); "
                "stop one with process_kill",
            )
            return
        call = Call(rid, request)
        self.wrap(call)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = (out_r, out_w) if request.merge_output else os.pipe2(os.O_CLOEXEC)
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        # Above the command's 0-3: dup2 onto itself would keep close-on-exec.
        high = fcntl.fcntl(status_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(status_w)
        status_w = high
        stdin_r, stdin_w = (
            os.pipe2(os.O_CLOEXEC)
            if body
            else (os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), -1)
        )
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            pid = self.spawn(call, stdin_r, out_w, err_w, status_w)
        except OSError as exc:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            for fd in {out_r, out_w, err_r, err_w, status_r, status_w, stdin_r, stdin_w} - {-1}:
                os.close(fd)
            self.settle_state(call)
            code = protocol.LIMIT_EXCEEDED if exc.errno == errno.EAGAIN else protocol.INTERNAL
            self.fail(rid, code, f"cannot start a process: {exc.strerror} (pids limit?)")
            return
        if pid == 0:
            os.close(self.proto_in)
            os.close(self.proto_out)
            for fd in (out_r, err_r, status_r, stdin_w, self.wake_r, call.state_fd):
                if fd >= 0:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            procs.run_subreaper(self.launch(call), stdin_r, out_w, err_w, status_w)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        for fd in {out_w, err_w, status_w, stdin_r}:
            os.close(fd)
        call.reaper_pid = pid
        self.calls[rid] = call
        self.by_reaper[pid] = call
        for fd, name in ((out_r, "stdout"), (err_r, "stderr")):
            if fd not in call.fds:
                os.set_blocking(fd, False)
                call.fds[fd] = name
                self.sel.register(fd, selectors.EVENT_READ, ("out", call))
        os.set_blocking(status_r, False)
        call.status_fd = status_r
        self.sel.register(status_r, selectors.EVENT_READ, ("status", call))
        if stdin_w >= 0:
            os.set_blocking(stdin_w, False)
            self.sel.register(stdin_w, selectors.EVENT_WRITE, ("stdin", [call, memoryview(body)]))

    @staticmethod
    def launch(call: Call) -> procs.Launch:
        request = call.request
        return procs.Launch(
            command=call.command,
            cwd=request.cwd,
            env=request.env,
            uid=SANDBOX_UID,
            gid=SANDBOX_GID,
            grace_s=request.grace_s,
        )

    def spawn(self, call: Call, stdin_r: int, out_w: int, err_w: int, status_w: int) -> int:
        """The call's subreaper: the C helper if it runs here, else a fork (0 in the child)."""
        if procs.NATIVE:
            try:
                return procs.spawn_native(self.launch(call), stdin_r, out_w, err_w, status_w)
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    raise
                # The helper cannot run in this sandbox: use the fork for good.
                print(f"agent: native spawn unavailable ({exc}); forking", file=sys.stderr)
                procs.NATIVE = False
        return os.fork()

    def on_output(self, fd: int, call: Call, draining: bool = False) -> None:
        if fd not in call.fds:
            return  # closed earlier in this round of events
        try:
            data = os.read(fd, READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.sel.unregister(fd)
            os.close(fd)
            call.fds.pop(fd, None)
            if not draining:
                self.maybe_finish(call)
            return
        if call.done:
            # A background child still writes: drain (into the ring of a
            # background process, else nowhere), so it neither blocks on a
            # full pipe nor dies of SIGPIPE.
            if call.proc is not None:
                call.proc.ring.add(data)
            return
        call.last_output = time.monotonic()
        name = call.fds[fd]
        call.captures[name].add(data)
        if call.stream and call.stream_budget > 0:
            chunk = data[: call.stream_budget]
            call.stream_budget -= len(chunk)
            self.send(protocol.Output(stream=name), call.rid, chunk)

    def on_stdin(self, fd: int, state: List[Any]) -> None:
        call, view = state
        try:
            n = os.write(fd, view) if not call.done or call.proc else len(view)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            n = len(view)  # the reader went away; the rest is moot
        view = view[n:]
        state[1] = view
        if not view:
            self.sel.unregister(fd)
            os.close(fd)

    def on_status(self, fd: int, call: Call) -> None:
        if call.status_fd != fd:
            return
        self.read_status(call)
        self.maybe_finish(call)

    def read_status(self, call: Call) -> None:
        """Take in what the subreaper reported; close the pipe at its end.

        Anything but whole, known records ends the call with INTERNAL: a
        report the agent cannot read is never taken for an outcome.
        """
        while call.status_fd >= 0:
            try:
                data = os.read(call.status_fd, 4096)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                self.close_status(call)
                if call.status_buf:
                    self.abort(call, f"the call's subreaper ended mid-report ({call.status_buf!r})")
                return
            try:
                records, call.status_buf = procs.decode_reports(call.status_buf + data)
            except procs.ReportError as exc:
                self.abort(call, f"the call's subreaper sent a malformed report: {exc}")
                return
            for kind, a, b in records:
                if kind == procs.PID:
                    call.main_pid = a
                elif kind == procs.STATUS:
                    call.status = a
                    self.settle_state(call)
                else:
                    call.spawn_error = (a, b)

    def close_status(self, call: Call) -> None:
        if call.status_fd >= 0:
            self.sel.unregister(call.status_fd)
            os.close(call.status_fd)
            call.status_fd = -1

    def abort(self, call: Call, message: str) -> None:
        """End `call` now with an INTERNAL failure that says why, and stop
        what it started: never silence, never an outcome the agent made up."""
        if call.done:
            return
        self.close_status(call)
        self.kill(call, "aborted")
        call.done = True
        self.calls.pop(call.rid, None)
        self.settle_state(call)
        self.fail(call.rid, protocol.INTERNAL, f"{message}; its processes were stopped")

    def drain(self, call: Call) -> None:
        """Take what the main process wrote before it exited."""
        for fd in list(call.fds):
            while fd in call.fds and not call.done:
                before = call.captures[call.fds[fd]].total
                self.on_output(fd, call, draining=True)
                if fd in call.fds and call.captures[call.fds[fd]].total == before:
                    break

    def maybe_finish(self, call: Call) -> None:
        if call.done:
            if call.proc is not None:
                self.proc_update(call.proc)
            return
        if call.reaper_exited:
            # SIGCHLD may be seen before the status pipe is read: the main
            # process's exit status is in it, not a reason to say "killed".
            self.read_status(call)
        killed = bool(call.reason)
        if killed:
            # A killed call ends when its subreaper is gone (tree dead) or
            # when the hard deadline passes.
            if not call.reaper_exited:
                return
        elif call.status is None and call.spawn_error is None and not call.reaper_exited:
            return
        if call.settle_at is not None and not killed and call.spawn_error is None:
            # A background command whose main process is gone: answer once
            # its whole tree is gone too, or at the settle time.
            if call.reaper_exited or time.monotonic() >= call.settle_at:
                self.drain(call)
                self.detach(call, idle=False)
            return
        self.drain(call)
        self.finish(call)

    def finish(self, call: Call) -> None:
        if call.done:
            return
        call.done = True
        self.calls.pop(call.rid, None)
        self.settle_state(call)
        if call.spawn_error is not None:
            code, why = procs.failure_of_spawn(*call.spawn_error, call.request.cwd)
            self.fail(call.rid, code, f"cannot start the command: {why}")
            return
        after = procs.oom_kills()
        result = protocol.ExecResult(
            call_id=call.request.call_id,
            exit_code=self.exit_code(call),
            killed=call.reason,
            background_cap_hit=call.idle_cap_hit,
            oom=call.oom_before is not None and after is not None and after > call.oom_before,
        )
        if call.shell_state is not None and not call.reason:
            result.shell_state = call.shell_state
        self.send_captured(call, result)

    def exit_code(self, call: Call) -> Optional[int]:
        if call.status is not None:
            return procs.exit_code_of(call.status)
        if call.done and call.proc is not None and not call.reaper_exited:
            return None  # still running in the background
        return 128 + signal.SIGKILL

    def send_captured(self, call: Call, result: protocol.ExecResult) -> None:
        """Answer the call with the head and tail it captured so far."""
        out, err = call.captures["stdout"], call.captures["stderr"]
        result.stdout = out.finish()
        result.stderr = err.finish()
        result.duration_ms = int((time.monotonic() - call.started) * 1000)
        body = bytes(out.head) + bytes(out.tail) + bytes(err.head) + bytes(err.tail)
        call.captures.clear()
        self.send(result, call.rid, body)

    def kill(self, call: Call, reason: str) -> None:
        if call.reason:
            return
        call.reason = reason
        call.hard_deadline = time.monotonic() + call.request.grace_s + 0.3
        if call.reaper_exited:
            self.maybe_finish(call)
            return
        try:
            os.kill(call.reaper_pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    def on_children(self) -> None:
        while True:
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            # As PID 1 the agent also inherits orphans of dead subreapers:
            # only its own subreapers matter here.
            call = self.by_reaper.pop(pid, None)
            if call is not None:
                call.reaper_exited = True
                self.maybe_finish(call)

    def check_deadlines(self) -> Optional[float]:
        now = time.monotonic()
        wait: Optional[float] = None
        # Background processes being killed still need their hard deadline.
        calls = list(self.calls.values()) + [p.call for p in self.background.killing()]
        for call in calls:
            if call.done and call.proc is None:
                continue
            if not call.done and not call.reason and call.settle_at is not None:
                if now >= call.settle_at:
                    self.drain(call)
                    if not call.done:
                        self.detach(call, idle=False)
                    continue
            elif not call.done and call.status is None and not call.reason:
                if now >= call.deadline:
                    self.kill(call, "deadline")
                elif call.idle_s and now >= call.last_output + call.idle_s:
                    self.on_silence(call)
                    if call.done:
                        continue
            if call.hard_deadline is not None and now >= call.hard_deadline:
                # The subreaper did not finish killing in time: answer anyway
                # and take the subreaper down (its orphans fall to us).
                try:
                    os.kill(call.reaper_pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                call.reaper_exited = True
                self.maybe_finish(call)
                continue
            nxt = call.hard_deadline if call.reason else self.next_check(call)
            if nxt is not None:
                wait = nxt - now if wait is None else min(wait, nxt - now)
        return None if wait is None else max(0.0, wait)

    @staticmethod
    def next_check(call: Call) -> Optional[float]:
        if call.settle_at is not None:
            return call.settle_at
        if call.status is not None:
            return None
        if call.idle_s:
            return min(call.deadline, call.last_output + call.idle_s)
        return call.deadline
