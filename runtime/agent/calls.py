"""The `exec` and `cancel` operations: commands, their output and their answer.

Each command runs as the sandbox user, marked with a group of its own call
(procs.py starts it, tracker.py finds and kills it); the agent watches its
pipes on the one selector loop (loop.py), its deadlines and its tree
(deadlines.py), and answers with exactly one ExecResult.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import errno
import os
import selectors
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple

from . import healing, procs, protocol, spare, terminal, tracker
from .background import Proc, Registry
from .capture import READ_CHUNK, Capture
from .ops import operation
from .protocol import SANDBOX_GID, SANDBOX_UID
from .redact import Redactor, Stream
from .state import StateChannel, wrap_command

if TYPE_CHECKING:
    from .loop import Agent


class Call:
    """One command, and its processes, from its request until they are gone."""

    def __init__(self, rid: int, request: protocol.Exec, group: int, redactor: Redactor) -> None:
        self.rid = rid
        self.request = request
        # The attach epoch it started under: its answer and output go to that
        # daemon (a later one's request ids start again at 1).
        self.epoch = 0
        # Every process of the call carries it (tracker.py).
        self.group = group
        # What bash runs: the user's command behind the state trap (background.wrap).
        self.command = request.command
        self.stream = request.stream
        self.stream_budget = request.stream_cap
        cap, head = request.output_cap, request.head_fraction
        self.captures: Dict[str, Capture] = {
            "stdout": Capture(cap, head),
            "stderr": Capture(cap, head),
        }
        # Secrets are redacted before anything is captured, streamed or
        # kept for a background read; bytes read so far, redacted or held.
        self.redactors: Dict[str, Stream] = {
            "stdout": redactor.stream(),
            "stderr": redactor.stream(),
        }
        self.read_bytes = 0
        # The main process (the launcher, then bash): the agent's own child.
        self.pid = 0
        self.status: Optional[int] = None  # its wait status, once reaped
        # The launcher's report pipe, until it closes; what it said.
        self.report_fd = -1
        self.report_buf = b""
        self.spawn_error: Optional[Tuple[int, int]] = None  # (stage, errno)
        # No process of the group is left (known only once the main one is reaped).
        self.tree_gone = False
        self.started = time.monotonic()
        self.deadline = self.started + request.timeout_s
        # Being killed: why ("deadline", "idle", "cancelled", "killed",
        # "aborted"), when TERM's grace ends, when to answer regardless.
        self.reason = ""
        self.kill_at: Optional[float] = None
        self.give_up_at: Optional[float] = None
        self.oom_before = procs.oom_kills()
        self.fds: Dict[int, str] = {}
        self.done = False
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
        # The socket the command's EXIT trap reports its directory (and env)
        # to (state.py), what it reported, and notes for the result.
        self.state: Optional[StateChannel] = None
        self.shell_state: Optional[protocol.ShellReport] = None
        self.notes: List[str] = []
        # Set once the call was answered but its processes kept running.
        self.proc: Optional[Proc] = None
        # Its terminal's master side, for ProcessInput (-1: no terminal).
        self.input_fd = -1


@operation(protocol.Exec)
def op_exec(agent: Agent, rid: int, request: protocol.Exec, body: bytes) -> None:
    agent.start_call(rid, request, body)


@operation(protocol.Cancel)
def op_cancel(agent: Agent, rid: int, request: protocol.Cancel, body: bytes) -> None:
    call = agent.calls.get(request.target)
    if call is not None and not call.done:
        agent.kill(call, request.reason)
    file_op = agent.file_ops.get(request.target)
    if file_op is not None:
        file_op.set()
    agent.send(protocol.Cancelled(), rid)


class CallOps:
    """The agent's methods for running calls.

    A mixin of `loop.Agent`, kept here so the loop stays readable; it uses
    the agent's selector, `send` and `fail`, background.BackgroundOps and
    deadlines.TreeOps.
    """

    sel: selectors.BaseSelector
    calls: Dict[int, Call]
    by_pid: Dict[int, Call]
    groups: tracker.Groups
    background: Registry
    # The session's secrets (redact.op_secrets replaces it).
    redactor: Redactor = Redactor()

    if TYPE_CHECKING:

        def send(
            self,
            message: protocol.Message,
            rid: int,
            body: bytes = b"",
            epoch: Optional[int] = None,
        ) -> None: ...
        def fail(self, rid: int, code: str, message: str) -> None: ...
        def wrap(self, call: Call) -> None: ...
        def settle_state(self, call: Call) -> None: ...
        def detach(self, call: Call, idle: bool) -> None: ...
        def proc_update(self, proc: Proc) -> None: ...
        def kill(self, call: Call, reason: str) -> None: ...
        def relieve(self, kind: Optional[str], also_keep: Optional[Set[int]] = None) -> bool: ...
        def answer_call(self, call: Call, message: protocol.Message, body: bytes = b"") -> None: ...
        def resumed(self, rid: int, request: protocol.Exec) -> bool: ...

    epoch: int
    running: Dict[str, Call]
    # The next call's shell, started ahead (spare.py), and where it starts.
    spare_shell: Optional[spare.Spare] = None
    spare_plan: Optional[spare.Plan] = None

    healer: healing.Healer

    def start_call(self, rid: int, request: protocol.Exec, body: bytes) -> None:
        if self.resumed(rid, request):
            return
        cap = request.max_background
        if request.background and not self.background.has_room(cap):
            self.fail(
                rid,
                protocol.LIMIT_EXCEEDED,
                f"{cap} background processes are already running (the session's maximum); "
                "stop one with process_kill",
            )
            return
        env = self.redactor.environment(request.env)
        # The spare shell has pipes, not a terminal.
        ready = None if request.tty else self.spare_for(request)
        call = Call(rid, request, ready.group if ready else self.groups.allocate(), self.redactor)
        call.epoch = self.epoch
        self.healer.started(call.group, request.call_id)
        # Leftovers of earlier calls must not leave this one without room.
        self.relieve(healing.pressure(), {call.group})
        self.spare_plan = (
            None
            if request.spare_env is None
            else spare.Plan(request.cwd, self.redactor.environment(request.spare_env))
        )
        if ready is not None:
            if self.start_in_spare(call, ready, env, body):
                return
            call.group = self.groups.allocate()
            self.healer.started(call.group, request.call_id)
        self.wrap(call)
        out_r, out_w, err_r, err_w, stdin_r, stdin_w = self.call_streams(call, body)
        report_r, report_w = os.pipe2(os.O_CLOEXEC)
        report_w = procs.above_floor(report_w)
        launch = procs.Launch(
            command=call.command,
            cwd=request.cwd,
            env=env,
            uid=SANDBOX_UID,
            gid=SANDBOX_GID,
            group=call.group,
            stdin=stdin_r,
            stdout=out_w,
            stderr=err_w,
            report=report_w,
            state=call.state.peer if call.state is not None else -1,
        )
        try:
            pid = self.spawn_with_room(launch)
        except OSError as exc:
            for fd in {out_r, out_w, err_r, err_w, report_r, report_w, stdin_r, stdin_w} - {-1}:
                os.close(fd)
            if launch.state >= 0:
                os.close(launch.state)
            self.end_input(call)
            self.settle_state(call)
            code, why = procs.failure_of_spawn(procs.STAGE_EXEC, exc.errno or errno.EIO, "")
            notes = "".join(f"; {note}" for note in self.healer.take_notes())
            self.fail(rid, code, f"cannot start a process: {why}{notes}")
            return
        for fd in {out_w, err_w, report_w, stdin_r, launch.state} - {-1}:
            os.close(fd)
        self.watch(call, pid, out_r, err_r, stdin_w, body)
        os.set_blocking(report_r, False)
        call.report_fd = report_r
        self.sel.register(report_r, selectors.EVENT_READ, ("report", call))

    @staticmethod
    def call_streams(call: Call, body: bytes) -> Tuple[int, int, int, int, int, int]:
        """(out_r, out_w, err_r, err_w, stdin_r, stdin_w) of a command; its
        ends all above procs.FD_FLOOR, clear of its 0-3. Under a terminal
        all three are the terminal (stdin_w: a copy of its master for the
        body, if any; call.input_fd another, for ProcessInput)."""
        if call.request.tty:
            master, slave = terminal.open_terminal(protocol.TTY_ROWS, protocol.TTY_COLS)
            slave = procs.above_floor(slave)
            call.input_fd = os.dup(master)
            os.set_blocking(call.input_fd, False)
            return master, slave, master, slave, slave, os.dup(master) if body else -1
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        out_w = procs.above_floor(out_w)
        err_r, err_w = (out_r, out_w) if call.request.merge_output else os.pipe2(os.O_CLOEXEC)
        err_w = procs.above_floor(err_w)
        stdin_r, stdin_w = (
            os.pipe2(os.O_CLOEXEC)
            if body
            else (os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), -1)
        )
        return out_r, out_w, err_r, err_w, procs.above_floor(stdin_r), stdin_w

    def end_input(self, call: Call) -> None:
        """Close its terminal's input side: nothing more is typed into it."""
        if call.input_fd >= 0:
            os.close(call.input_fd)
            call.input_fd = -1

    def watch(
        self, call: Call, pid: int, out_r: int, err_r: int, stdin_w: int, body: bytes
    ) -> None:
        """Follow a started call: its process, output and stdin."""
        call.notes.extend(self.healer.take_notes())
        call.pid = pid
        if call.request.call_id:
            self.running[call.request.call_id] = call
        if call.state is not None:
            call.state.shell_pid = pid
        self.calls[call.rid] = call
        self.by_pid[pid] = call
        for fd, name in ((out_r, "stdout"), (err_r, "stderr")):
            if fd not in call.fds:
                os.set_blocking(fd, False)
                call.fds[fd] = name
                self.sel.register(fd, selectors.EVENT_READ, ("out", call))
        if stdin_w >= 0:
            os.set_blocking(stdin_w, False)
            self.sel.register(stdin_w, selectors.EVENT_WRITE, ("stdin", [call, memoryview(body)]))

    # -- the spare shell (spare.py) ----------------------------------------
    def spare_for(self, request: protocol.Exec) -> Optional[spare.Spare]:
        """The spare, taken, when it may become this call's shell. One for
        another cwd, or dead, is discarded (the next idle moment starts one
        as this call); one still starting is left for a later call."""
        found = self.spare_shell
        if found is None:
            return None
        usable = (
            not found.dead
            and found.cwd == request.cwd
            and spare.directory_id(request.cwd) == found.cwd_id
        )
        state = spare.ready(found) if usable else False
        if state is None:
            return None
        self.spare_shell = None
        if not state:
            spare.discard(found)
            return None
        return found

    def start_in_spare(
        self, call: Call, ready: spare.Spare, env: Dict[str, str], body: bytes
    ) -> bool:
        """Make the spare the call's shell; False (and the spare discarded)
        when it cannot be, before anything of the call ran. A call with
        stdin starts its own shell: the spare's stdin is /dev/null, as no
        other process could have written into it while it waited."""
        request = call.request
        command = wrap_command(
            request.command, request.report_state, request.pipefail, request.report_env
        )
        script = None
        if not body and spare.untouched(ready):
            script = spare.script_for(
                ready, env, command, request.merge_output, request.report_state
            )
        if script is None or not spare.release(ready, script):
            spare.discard(ready)
            return False
        os.close(ready.script)
        os.close(ready.report_r)
        ready.go.close()
        call.command = command
        if request.report_state:
            call.state = ready.state
            self.sel.register(ready.state.fileno(), selectors.EVENT_READ, ("state", call))
            ready.state.registered = True
        else:
            ready.state.close()
        err_r = ready.err_r
        if request.merge_output:
            os.close(err_r)  # the preamble put stderr on stdout
            err_r = ready.out_r
        self.watch(call, ready.pid, ready.out_r, err_r, -1, body)
        return True

    def start_spare(self) -> None:
        """Start the next call's shell ahead, when the session is idle and has room."""
        plan = self.spare_plan
        if plan is None or healing.pressure() is not None:
            return
        self.spare_shell = spare.start(plan, self.groups.allocate(), SANDBOX_UID, SANDBOX_GID)
        if self.spare_shell is None:
            self.spare_plan = None  # not again until the next call says where

    def drop_spare(self) -> Optional[int]:
        """Kill the waiting spare, if any; its group. The next idle moment
        starts another."""
        found, self.spare_shell = self.spare_shell, None
        if found is None:
            return None
        spare.discard(found)
        return found.group

    def spare_reaped(self, pid: int) -> None:
        """The spare died unused (another process of the sandbox user killed
        it): none again until the next call, so a killer is not fed spares."""
        ready = self.spare_shell
        if ready is not None and ready.pid == pid:
            ready.dead = True
            self.spare_shell = self.spare_plan = None
            spare.discard(ready)

    def spare_wanted(self) -> bool:
        return (
            spare.ENABLED
            and procs.NATIVE
            and self.spare_shell is None
            and self.spare_plan is not None
            and not self.calls
        )

    def spawn_with_room(self, launch: procs.Launch) -> int:
        """spawn, retried once after stopping runaway leftovers when the pids
        or memory limit refused it."""
        try:
            return self.spawn(launch)
        except OSError as exc:
            kind = {errno.EAGAIN: healing.PIDS, errno.ENOMEM: healing.MEMORY}.get(exc.errno or 0)
            if not self.relieve(kind, {launch.group}):
                raise
        return self.spawn(launch)

    @staticmethod
    def spawn(launch: procs.Launch) -> int:
        """The command's main process: the C launcher if it runs here, else a fork."""
        if procs.NATIVE:
            try:
                return procs.spawn_native(launch)
            except OSError as exc:
                if exc.errno not in procs.HELPER_UNUSABLE:
                    raise
                # The helper cannot run in this sandbox: use the fork for good.
                print(f"agent: native spawn unavailable ({exc}); forking", file=sys.stderr)
                procs.NATIVE = False
        return procs.spawn_fork(launch)

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
            name = call.fds.pop(fd)
            self.take_output(call, name, call.redactors[name].flush())
            if not draining:
                self.maybe_finish(call)
            return
        call.read_bytes += len(data)
        name = call.fds[fd]
        if not call.done:
            call.last_output = time.monotonic()
        self.take_output(call, name, call.redactors[name].feed(data))

    def take_output(self, call: Call, name: str, data: bytes) -> None:
        """Redacted output: the call's capture and stream, or once the call
        is answered, the ring of its background process (else nowhere: a
        background child still writing neither blocks on a full pipe nor
        dies of SIGPIPE)."""
        if not data:
            return
        if call.done:
            if call.proc is not None:
                call.proc.ring.add(data)
            return
        call.captures[name].add(data)
        if call.stream and call.stream_budget > 0:
            chunk = data[: call.stream_budget]
            call.stream_budget -= len(chunk)
            self.send(protocol.Output(stream=name), call.rid, chunk, call.epoch)

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

    def on_report(self, fd: int, call: Call) -> None:
        if call.report_fd == fd:
            self.read_report(call)
            self.maybe_finish(call)

    def read_report(self, call: Call) -> None:
        """Take in what the launcher said, up to the pipe's end (it closes
        when bash starts). Anything but nothing or one known record ends the
        call with INTERNAL: a report the agent cannot read is never taken
        for an outcome."""
        while call.report_fd >= 0:
            try:
                data = os.read(call.report_fd, procs.REPORT_MAX)
            except (BlockingIOError, InterruptedError):
                return
            call.report_buf += data
            if data and len(call.report_buf) <= procs.REPORT_MAX:
                continue
            self.close_report(call)
            try:
                call.spawn_error = procs.decode_report(call.report_buf)
            except procs.ReportError as exc:
                self.abort(call, f"the command's launcher sent a malformed report: {exc}")

    def close_report(self, call: Call) -> None:
        if call.report_fd >= 0:
            self.sel.unregister(call.report_fd)
            os.close(call.report_fd)
            call.report_fd = -1

    def abort(self, call: Call, message: str) -> None:
        """End `call` now with an INTERNAL failure that says why, and kill
        what it started: never silence, never an outcome the agent made up."""
        if call.done:
            return
        self.close_report(call)
        self.end_input(call)
        call.reason = "aborted"
        tracker.stop_and_kill(call.group, [call.pid] if call.status is None else [])
        call.done = True
        self.calls.pop(call.rid, None)
        self.settle_state(call)
        failure = protocol.Failure(
            code=protocol.INTERNAL, message=f"{message}; its processes were killed"
        )
        self.answer_call(call, failure)

    def drain(self, call: Call) -> None:
        """Take what the main process wrote before it exited."""
        for fd in list(call.fds):
            while fd in call.fds and not call.done:
                before = call.read_bytes
                self.on_output(fd, call, draining=True)
                if fd in call.fds and call.read_bytes == before:
                    break

    def maybe_finish(self, call: Call) -> None:
        """Answer the call if what it waits for has happened."""
        if call.done:
            if call.proc is not None:
                self.proc_update(call.proc)
            return
        if call.status is None or call.report_fd >= 0:
            return  # the main process runs (or its launcher has not said how it went)
        if call.reason:
            # A killed call ends when its whole tree is gone (or when the
            # agent gives up waiting: deadlines.py).
            if call.tree_gone:
                self.finish(call)
            return
        if call.settle_at is not None and call.spawn_error is None:
            # A background command whose main process is gone: answer once
            # its whole tree is gone too, or at the settle time.
            if call.tree_gone:
                self.drain(call)
                self.detach(call, idle=False)
            return
        self.drain(call)
        self.finish(call)

    def finish(self, call: Call) -> None:
        if call.done:
            return
        # Its output has ended (or is dropped from now on): what could have
        # begun a secret is taken as it is, redacted.
        for name, stream in call.redactors.items():
            self.take_output(call, name, stream.flush())
        call.done = True
        self.calls.pop(call.rid, None)
        self.end_input(call)
        self.settle_state(call)
        if call.spawn_error is not None:
            code, why = procs.failure_of_spawn(*call.spawn_error, call.request.cwd)
            self.answer_call(
                call, protocol.Failure(code=code, message=f"cannot start the command: {why}")
            )
            return
        after = procs.oom_kills()
        result = protocol.ExecResult(
            call_id=call.request.call_id,
            exit_code=self.exit_code(call),
            killed=call.reason,
            background_cap_hit=call.idle_cap_hit,
            oom=call.oom_before is not None and after is not None and after > call.oom_before,
        )
        if not call.reason:
            result.shell_state = call.shell_state
            result.notes = call.notes
            if call.shell_state is not None and call.shell_state.cwd and self.spare_plan:
                # The next call starts where this shell left off.
                self.spare_plan = spare.Plan(call.shell_state.cwd, self.spare_plan.env)
        self.send_captured(call, result)

    def exit_code(self, call: Call) -> Optional[int]:
        if call.status is not None:
            return procs.exit_code_of(call.status)
        if call.done and call.proc is not None and not call.reason:
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
        self.answer_call(call, result, body)
