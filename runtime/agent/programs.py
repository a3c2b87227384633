"""The `spawn` operation: a program with bytes in and out (the Exec RPC).

A program is a call (calls.Call) whose command is an argv rather than a bash
line. It starts through the same launcher (procs.py), as the sandbox user
with a group of its own, so its deadline, a Cancel (the RPC cancelled, its
deadline, a disconnect) and its tree's end are handled as a command's are
(deadlines.py, tracker.py). What differs:

- `Spawned` goes out once the launcher's report pipe closes empty (the
  program's exec succeeded); a failed exec is a Failure whose code is the
  reason the client sees (FILE_NOT_FOUND, PERMISSION_DENIED...), before
  anything else;
- its stdin is fed by Stdin events as they arrive, a Credit back for each
  one written, so the agent holds at most a window of them;
- its output goes out as Output events as it is read (redacted, as every
  command's), up to a cap per stream, the rest counted, never captured;
  past a window of events the daemon has not credited back, its pipes
  are not read (the program waits on them), so a slow client holds the
  program back rather than filling the daemon's memory;
- Signal events reach its process group;
- with `tty`, a pseudo-terminal is its controlling terminal, stdin, stdout
  and stderr (one stream, "stdout"): Stdin types into it, Resize sets its
  window, a Signal goes to its foreground process group as a key would.

No spare shell, no shell state, no kept answer: a program's only listener
is the RPC that started it.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import collections
import errno
import os
import selectors
import signal
from typing import TYPE_CHECKING, Callable, Deque, Dict, Optional, Set, Tuple

from . import calls, flow, healing, procs, protocol, users
from .capture import Capture
from .ops import operation
from .redact import Redactor
from .terminal import open_terminal, set_window

if TYPE_CHECKING:
    from .loop import Agent

# Signals a client may send by name (protocol.Signal), without "SIG".
SIGNALS = {name: getattr(signal, "SIG" + name) for name in protocol.SIGNAL_NAMES}


class Forward(Capture):
    """A stream's output sent on as it is read, up to a cap; the rest counted."""

    def __init__(self, send: Callable[[bytes], None], cap: int) -> None:
        super().__init__(0, 0.0)
        self._send = send
        self.room = max(0, cap)
        self.dropped = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        chunk = data[: self.room]
        self.room -= len(chunk)
        self.dropped += len(data) - len(chunk)
        if chunk:
            self._send(chunk)


class OutputCredits(flow.Outflow):
    """A program's Output events the daemon has room for. Its Credits arrive
    on the loop (file_ops.op_credit), which resumes reading the program's
    output once there is room again."""

    def __init__(self, window: int, resume: Callable[[], None]) -> None:
        super().__init__(window)
        self.left = max(1, window)
        self._resume = resume

    def grant(self, chunks: int) -> None:
        self.left += max(0, chunks)
        if self.left > 0:
            self._resume()


class Program(calls.Call):
    """One Spawn: its argv, its stdin as it arrives, its forwarded output."""

    def __init__(
        self,
        rid: int,
        request: protocol.Spawn,
        argv: Tuple[str, ...],
        group: int,
        redactor: Redactor,
        send: Callable[[str, bytes], None],
    ) -> None:
        # What the call machinery reads of a request: where, how long, how gently.
        as_exec = protocol.Exec(
            cwd=request.cwd, timeout_s=request.timeout_s, grace_s=request.grace_s
        )
        super().__init__(rid, as_exec, group, redactor)
        self.spawn = request
        self.argv = argv
        self.announced = False
        self.captures = {
            name: Forward(_sender(send, name), request.output_cap) for name in ("stdout", "stderr")
        }
        # The write end of its stdin pipe (-1: none, or closed), and what
        # waits to be written there.
        self.stdin_fd = -1
        self.stdin_watched = False
        self.pending: Deque[memoryview] = collections.deque()
        self.eof = False
        # Its output pipes while out of credits: off the selector.
        self.paused: Dict[int, str] = {}
        self.credits: Optional[OutputCredits] = None
        # Its terminal's master side, kept for resizes and signals (-1: none).
        self.terminal = -1


def _sender(send: Callable[[str, bytes], None], name: str) -> Callable[[bytes], None]:
    return lambda chunk: send(name, chunk)


def decode_argv(body: bytes) -> Tuple[str, ...]:
    """A Spawn's body: each argument followed by a NUL byte."""
    if not body.endswith(b"\0"):
        return ()
    return tuple(os.fsdecode(arg) for arg in body[:-1].split(b"\0"))


def encode_argv(argv: Tuple[str, ...]) -> bytes:
    return b"".join(os.fsencode(arg) + b"\0" for arg in argv)


def exec_failure(program: Program, stage: int, err: int) -> Tuple[str, str]:
    """(reason, message) for a program that could not start."""
    if stage == procs.STAGE_CWD:
        what = f"cwd {program.spawn.cwd[:300]}"
        missing = {errno.ENOTDIR: protocol.NOT_A_DIRECTORY}
    elif stage == procs.STAGE_EXEC:
        what = program.argv[0][:300]
        missing = {errno.ENOTDIR: protocol.FILE_NOT_FOUND}
    else:
        return procs.failure_of_spawn(stage, err, program.spawn.cwd)
    reason = {
        errno.ENOENT: protocol.FILE_NOT_FOUND,
        errno.ELOOP: protocol.FILE_NOT_FOUND,
        errno.EACCES: protocol.PERMISSION_DENIED,
        errno.EPERM: protocol.PERMISSION_DENIED,
        errno.E2BIG: protocol.INVALID_REQUEST,
        errno.ENAMETOOLONG: protocol.INVALID_REQUEST,
        errno.EAGAIN: protocol.LIMIT_EXCEEDED,
        errno.ENOMEM: protocol.LIMIT_EXCEEDED,
        **missing,
    }.get(err, protocol.INTERNAL)
    return reason, f"{what}: {os.strerror(err)}"


@operation(protocol.Spawn)
def op_spawn(agent: Agent, rid: int, request: protocol.Spawn, body: bytes) -> None:
    agent.start_program(rid, request, decode_argv(body))


@operation(protocol.Stdin)
def op_stdin(agent: Agent, rid: int, request: protocol.Stdin, body: bytes) -> None:
    program = agent.calls.get(rid)
    if isinstance(program, Program):
        agent.feed(program, body, request.eof)
    elif body:
        # Its program is gone: the credit still comes back, nothing waits for it.
        agent.send(protocol.Credit(chunks=1), rid)


@operation(protocol.Signal)
def op_signal(agent: Agent, rid: int, request: protocol.Signal, body: bytes) -> None:
    program = agent.calls.get(rid)
    sig = SIGNALS.get(request.signal.upper())
    if isinstance(program, Program) and sig is not None and program.status is None:
        try:
            # Its launcher made it a process group's leader (setsid); under
            # a terminal, whatever runs in its foreground (a shell's job).
            os.killpg(foreground(program), sig)
        except OSError:
            try:
                os.kill(program.pid, sig)  # not yet its own group's leader
            except OSError:
                pass


@operation(protocol.Resize)
def op_resize(agent: Agent, rid: int, request: protocol.Resize, body: bytes) -> None:
    program = agent.calls.get(rid)
    if isinstance(program, Program) and program.terminal >= 0:
        try:
            set_window(program.terminal, max(0, request.rows), max(0, request.cols))
        except OSError:
            pass  # the terminal is gone with its program


def foreground(program: Program) -> int:
    """The process group a signal for `program` goes to."""
    if program.terminal >= 0:
        try:
            group = os.tcgetpgrp(program.terminal)
            if group > 0:
                return group
        except OSError:
            pass
    return program.pid


class ProgramOps(calls.CallOps, healing.HealOps):
    """The agent's methods for programs: calls.CallOps, with a program's start,
    stdin, announcement and end (a mixin of loop.Agent)."""

    flows: Dict[int, flow.Flow]

    def stop_leftovers(self, keep: Set[int]) -> int:
        """A restore's stop: running programs end too (DESIGN), where running
        calls are kept (they hold the session's write lock, programs do not)."""
        programs = {c.group for c in self.calls.values() if isinstance(c, Program)}
        return super().stop_leftovers(keep - programs)

    def start_program(self, rid: int, request: protocol.Spawn, argv: Tuple[str, ...]) -> None:
        if not argv or not argv[0]:
            self.fail(rid, protocol.INVALID_REQUEST, "argv is empty: name a program to run")
            return
        try:
            who = users.resolve(request.user, request.capabilities)
        except users.UnknownUser as exc:
            self.fail(rid, exc.code, exc.message)
            return
        epoch = self.epoch

        def send(name: str, chunk: bytes) -> None:
            self.announce(program)  # output proves the exec succeeded
            self.send(protocol.Output(stream=name), rid, chunk, epoch)
            credits.left -= 1
            if credits.left <= 0:
                self.pause_output(program)

        program = Program(rid, request, argv, self.groups.allocate(), self.redactor, send)
        program.epoch = epoch
        credits = OutputCredits(request.output_window, lambda: self.resume_output(program))
        program.credits = credits
        self.flows[rid] = credits
        self.healer.started(program.group, f"spawn {rid}")
        self.relieve(healing.pressure(), {program.group})
        report_r, report_w = os.pipe2(os.O_CLOEXEC)
        if request.tty:
            # One terminal for all three: read on its master, typed into on
            # a copy of it (the selector watches each descriptor once).
            out_r, slave = open_terminal(request.rows, request.cols)
            err_r, stdin_w = out_r, os.dup(out_r)
            program.terminal = os.dup(out_r)
            out_w = err_w = stdin_r = procs.above_floor(slave)
        else:
            out_r, out_w = os.pipe2(os.O_CLOEXEC)
            err_r, err_w = os.pipe2(os.O_CLOEXEC)
            if request.stdin_open:
                stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
            else:
                stdin_r, stdin_w = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), -1
        out_w, err_w, report_w, stdin_r = (
            procs.above_floor(fd) for fd in (out_w, err_w, report_w, stdin_r)
        )
        launch = procs.Launch(
            command="",
            argv=argv,
            cwd=request.cwd,
            env=self.redactor.environment(request.env),
            uid=who.uid,
            gid=who.gid,
            capabilities=who.capabilities,
            group=program.group,
            stdin=stdin_r,
            stdout=out_w,
            stderr=err_w,
            report=report_w,
        )
        theirs = {out_w, err_w, report_w, stdin_r}
        try:
            pid = self.spawn_with_room(launch)
        except OSError as exc:
            for fd in {out_r, err_r, report_r, stdin_w, program.terminal, *theirs} - {-1}:
                os.close(fd)
            self.flows.pop(rid, None)
            self.fail(rid, *procs.failure_of_spawn(procs.STAGE_SETUP, exc.errno or 0, ""))
            return
        for fd in theirs:
            os.close(fd)
        self.watch(program, pid, out_r, err_r, -1, b"")
        if stdin_w >= 0:
            os.set_blocking(stdin_w, False)
            program.stdin_fd = stdin_w
        os.set_blocking(report_r, False)
        program.report_fd = report_r
        self.sel.register(report_r, selectors.EVENT_READ, ("report", program))

    def announce(self, program: Program) -> None:
        if not program.announced and not program.done:
            program.announced = True
            self.send(protocol.Spawned(pid=program.pid), program.rid, b"", program.epoch)

    def read_report(self, call: calls.Call) -> None:
        super().read_report(call)
        closed = call.report_fd < 0 and call.spawn_error is None
        if isinstance(call, Program) and closed:
            self.announce(call)

    # -- output, within the daemon's credits ---------------------------------
    def pause_output(self, program: Program) -> None:
        if program.status is not None:
            return  # ended: what it left in its pipes is taken whole (drain)
        for fd, name in program.fds.items():
            if fd not in program.paused:
                self.sel.unregister(fd)
                program.paused[fd] = name

    def resume_output(self, program: Program) -> None:
        for fd in program.paused:
            self.sel.register(fd, selectors.EVENT_READ, ("out", program))
        program.paused.clear()

    def on_output(self, fd: int, call: calls.Call, draining: bool = False) -> None:
        if isinstance(call, Program) and fd in call.paused:
            return  # paused in this round of events: read once credits come
        super().on_output(fd, call, draining)

    def drain(self, call: calls.Call) -> None:
        # What an ended program wrote is taken whatever the credits (a pipe's
        # worth at most): its pipes go back on the selector to be read and closed.
        if isinstance(call, Program):
            self.resume_output(call)
        super().drain(call)

    # -- stdin --------------------------------------------------------------
    def feed(self, program: Program, data: bytes, eof: bool) -> None:
        if program.stdin_fd < 0:
            if data:
                self.credit(program, 1)
            return
        if data:
            program.pending.append(memoryview(data))
        program.eof = program.eof or eof
        if not program.stdin_watched:
            program.stdin_watched = True
            self.sel.register(program.stdin_fd, selectors.EVENT_WRITE, ("input", program))

    def on_input(self, fd: int, program: Program) -> None:
        if program.stdin_fd != fd:
            return  # closed earlier in this round of events
        while program.pending:
            view = program.pending[0]
            try:
                n = os.write(fd, view)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.close_input(program)  # the reader went away; the rest is moot
                return
            if n < len(view):
                program.pending[0] = view[n:]
                continue
            program.pending.popleft()
            self.credit(program, 1)
        if program.eof:
            if program.terminal >= 0:
                # A terminal has no end of input but the one typed: ^D
                # (VEOF) ends a line-reading program's input as at a keyboard.
                try:
                    os.write(fd, b"\x04")
                except OSError:
                    pass
            self.close_input(program)
        else:
            program.stdin_watched = False
            self.sel.unregister(fd)

    def close_input(self, program: Program) -> None:
        if program.stdin_fd < 0:
            return
        if program.stdin_watched:
            self.sel.unregister(program.stdin_fd)
        os.close(program.stdin_fd)
        program.stdin_fd = -1
        program.stdin_watched = False
        if program.pending:
            self.credit(program, len(program.pending))
            program.pending.clear()

    def close_terminal(self, program: Program) -> None:
        if program.terminal >= 0:
            os.close(program.terminal)
            program.terminal = -1

    def credit(self, program: Program, chunks: int) -> None:
        if not program.done:
            self.send(protocol.Credit(chunks=chunks), program.rid, b"", program.epoch)

    # -- the end ------------------------------------------------------------
    def abort(self, call: calls.Call, message: str) -> None:
        if isinstance(call, Program):
            self.resume_output(call)
            self.flows.pop(call.rid, None)
            self.close_input(call)
            self.close_terminal(call)
        super().abort(call, message)

    def finish(self, call: calls.Call) -> None:
        if not isinstance(call, Program):
            super().finish(call)
            return
        if call.done:
            return
        self.resume_output(call)  # later output is read and dropped, never left to block
        self.flows.pop(call.rid, None)
        for name, stream in call.redactors.items():
            self.take_output(call, name, stream.flush())
        self.close_input(call)
        self.close_terminal(call)
        if call.spawn_error is None:
            self.announce(call)  # it ran, even if its end was seen first
        call.done = True
        self.calls.pop(call.rid, None)
        if call.spawn_error is not None:
            code, message = exec_failure(call, *call.spawn_error)
            self.send(protocol.Failure(code=code, message=message), call.rid, b"", call.epoch)
            return
        exit_code, sig = 128 + signal.SIGKILL, "KILL"  # answered without its status
        if call.status is not None:
            exit_code = procs.exit_code_of(call.status)
            if os.WIFSIGNALED(call.status):
                sig = signal.Signals(os.WTERMSIG(call.status)).name[3:]
            else:
                sig = ""
        after = procs.oom_kills()
        out, err = call.captures["stdout"], call.captures["stderr"]
        reply = protocol.SpawnExit(
            exit_code=exit_code,
            signal=sig,
            killed=call.reason,
            oom=call.oom_before is not None and after is not None and after > call.oom_before,
            stdout_dropped=out.dropped if isinstance(out, Forward) else 0,
            stderr_dropped=err.dropped if isinstance(err, Forward) else 0,
        )
        self.send(reply, call.rid, b"", call.epoch)
