"""toolrt's in-sandbox agent: the container's main process.

Started by `python3 -I /opt/toolrt/main.py`, as root with only SETUID,
SETGID and KILL. It speaks framed messages (protocol.py) over the container's
attached stdin/stdout and runs each command as the sandbox user under a
per-call subreaper (procs.py). One thread, one selector loop: it never needs
to fork or start a thread to kill, so it still answers under a fork bomb.
When stdin closes (the daemon went away) it exits, and the container with it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import selectors
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

# -I drops the script's directory from sys.path; this directory is a
# read-only root-owned bind mount, so putting it back is safe.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import background  # noqa: E402
import files  # noqa: E402
import procs  # noqa: E402
import protocol  # noqa: E402

SANDBOX_UID = int(os.environ.get("TOOLRT_SANDBOX_UID", "1000"))
SANDBOX_GID = int(os.environ.get("TOOLRT_SANDBOX_GID", "1000"))
READ_CHUNK = 65536


class Capture:
    """Keeps the head and the tail of a stream within a byte cap."""

    def __init__(self, cap: int, head_fraction: float) -> None:
        self.head_cap = max(0, int(cap * head_fraction))
        self.tail_cap = max(0, cap - self.head_cap)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.dropped_lines = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        # Trim lazily so a flood of small reads stays linear.
        if len(self.tail) > 2 * self.tail_cap + READ_CHUNK:
            self._trim()

    def _trim(self) -> None:
        excess = len(self.tail) - self.tail_cap
        if excess > 0:
            self.dropped_lines += self.tail.count(b"\n", 0, excess)
            del self.tail[:excess]

    def finish(self) -> dict[str, Any]:
        self._trim()
        return {
            "head": len(self.head),
            "tail": len(self.tail),
            "total": self.total,
            "dropped_lines": self.dropped_lines,
        }


class Call:
    """One running command and everything the loop tracks for it."""

    def __init__(self, rid: int, spec: dict[str, Any]) -> None:
        self.rid = rid
        self.spec = spec
        self.stream = bool(spec.get("stream"))
        self.stream_budget = int(spec.get("stream_cap", 8 << 20))
        cap = int(spec.get("output_cap", 1 << 20))
        head = float(spec.get("head_fraction", 0.2))
        self.captures = {"stdout": Capture(cap, head), "stderr": Capture(cap, head)}
        self.reaper_pid = 0
        self.main_pid = 0
        self.status: int | None = None
        self.spawn_error: dict[str, Any] | None = None
        self.reaper_exited = False
        self.deadline = time.monotonic() + float(spec.get("timeout_s", 60))
        self.hard_deadline: float | None = None
        self.reason = ""  # why it was killed: "deadline", "cancelled", "shutdown"
        self.oom_before = procs.oom_kills()
        self.fds: dict[int, str] = {}
        self.status_buf = b""
        self.status_fd = -1
        self.done = False
        self.started = time.monotonic()
        # Silence detection: no output for idle_s → on_idle ("background" or "kill").
        self.idle_s = float(spec.get("idle_timeout_s") or 0)
        self.on_idle = str(spec.get("on_idle", "kill"))
        self.last_output = self.started
        # `background` calls answer after a short settle time and never time out.
        self.settle_at: float | None = None
        if spec.get("background"):
            self.settle_at = self.started + float(spec.get("settle_s", 0.5))
            self.deadline = float("inf")
            self.idle_s = 0.0
        # The FIFO the command's EXIT trap reports its directory (and env) to.
        self.state_fd = -1
        self.state_path = ""
        self.state_buf = bytearray()
        self.shell_state: dict[str, Any] | None = None
        # Set once the call was answered but its processes kept running.
        self.proc: background.Proc | None = None


class Agent(background.BackgroundOps):
    def __init__(self, proto_in: int, proto_out: int) -> None:
        self.proto_in = proto_in
        self.proto_out = proto_out
        self.decoder = protocol.Decoder()
        self.sel = selectors.DefaultSelector()
        self.calls: dict[int, Call] = {}
        self.by_reaper: dict[int, Call] = {}
        self.handlers: dict[str, Callable[[int, dict[str, Any], bytes], None]] = {
            "exec": self.op_exec,
            "cancel": self.op_cancel,
            "ping": self.op_ping,
            "process_list": self.op_process_list,
            "process_output": self.op_process_output,
            "process_kill": self.op_process_kill,
        }
        self.background = background.Registry()
        self.state_dir = background.make_state_dir()
        self.handlers.update(files.handlers(self))
        self.wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.sel.register(self.wake_r, selectors.EVENT_READ, ("wake", None))
        self.sel.register(proto_in, selectors.EVENT_READ, ("proto", None))

    # -- protocol ---------------------------------------------------------
    def send(self, header: dict[str, Any], body: bytes = b"") -> None:
        data = memoryview(protocol.encode(header, body))
        while data:
            try:
                n = os.write(self.proto_out, data)
            except InterruptedError:
                continue
            data = data[n:]

    def reply_error(self, rid: int, code: str, message: str) -> None:
        self.send({"id": rid, "op": "error", "done": True, "code": code, "message": message})

    def on_proto(self) -> bool:
        try:
            data = os.read(self.proto_in, 1 << 20)
        except (BlockingIOError, InterruptedError):
            return True
        if not data:
            return False
        for header, body in self.decoder.feed(data):
            rid = int(header.get("id", 0))
            handler = self.handlers.get(str(header.get("op")))
            if handler is None:
                self.reply_error(rid, "INTERNAL", f"unknown op {header.get('op')!r}")
                continue
            try:
                handler(rid, header, body)
            except Exception as exc:  # noqa: BLE001 - one bad request must not end the agent
                self.reply_error(rid, "INTERNAL", f"{type(exc).__name__}: {exc}")
        return True

    def op_ping(self, rid: int, header: dict[str, Any], body: bytes) -> None:
        self.send({"id": rid, "op": "pong", "done": True})

    def op_cancel(self, rid: int, header: dict[str, Any], body: bytes) -> None:
        call = self.calls.get(int(header["target"]))
        if call is not None and not call.done:
            self.kill(call, str(header.get("reason", "cancelled")))
        self.send({"id": rid, "op": "cancelled", "done": True})

    # -- exec -------------------------------------------------------------
    def op_exec(self, rid: int, spec: dict[str, Any], body: bytes) -> None:
        cap = int(spec.get("max_background", 8))
        if spec.get("background") and not self.background.has_room(cap):
            self.reply_error(
                rid,
                "LIMIT_EXCEEDED",
                f"{cap} background processes are already running (the session's maximum); "
                "stop one with process_kill",
            )
            return
        call = Call(rid, spec)
        spec["uid"], spec["gid"] = SANDBOX_UID, SANDBOX_GID
        self.wrap(call)
        merge = bool(spec.get("merge_output"))
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = (out_r, out_w) if merge else os.pipe2(os.O_CLOEXEC)
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
            pid = self.spawn(spec, stdin_r, out_w, err_w, status_w)
        except OSError as exc:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            for fd in {out_r, out_w, err_r, err_w, status_r, status_w, stdin_r, stdin_w} - {-1}:
                os.close(fd)
            self.settle_state(call)
            code = "LIMIT_EXCEEDED" if exc.errno == errno.EAGAIN else "INTERNAL"
            self.reply_error(rid, code, f"cannot start a process: {exc.strerror} (pids limit?)")
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
            procs.run_subreaper(spec, stdin_r, out_w, err_w, status_w)
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

    def spawn(
        self, spec: dict[str, Any], stdin_r: int, out_w: int, err_w: int, status_w: int
    ) -> int:
        """The call's subreaper: the C helper if it runs here, else a fork (0 in the child)."""
        if procs.NATIVE:
            try:
                return procs.spawn_native(spec, stdin_r, out_w, err_w, status_w)
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
            self.send({"id": call.rid, "op": "out", "stream": name}, chunk)

    def on_stdin(self, fd: int, state: list[Any]) -> None:
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
        """Take in what the subreaper reported; close the pipe at its end."""
        while call.status_fd >= 0:
            try:
                data = os.read(call.status_fd, 4096)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                self.sel.unregister(call.status_fd)
                os.close(call.status_fd)
                call.status_fd = -1
                return
            call.status_buf += data
            *lines, call.status_buf = call.status_buf.split(b"\n")
            for line in lines:
                msg = json.loads(line)
                if "pid" in msg:
                    call.main_pid = msg["pid"]
                elif "status" in msg:
                    call.status = msg["status"]
                    self.settle_state(call)
                elif "spawn_error" in msg:
                    call.spawn_error = msg

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
        header: dict[str, Any] = {"id": call.rid, "op": "exit", "done": True}
        if call.spawn_error is not None:
            err_no = call.spawn_error.get("errno")
            header["op"] = "error"
            header["code"] = (
                "LIMIT_EXCEEDED"
                if err_no == errno.EAGAIN
                else ("NOT_FOUND" if err_no == errno.ENOENT else "INTERNAL")
            )
            header["message"] = f"cannot start the command: {call.spawn_error['spawn_error']}"
            self.send(header)
            return
        header["exit_code"] = self.exit_code(call)
        header["killed"] = call.reason
        header["background_cap_hit"] = bool(call.spec.get("idle_cap_hit"))
        after = procs.oom_kills()
        header["oom"] = (
            call.oom_before is not None and after is not None and after > call.oom_before
        )
        if call.shell_state and not call.reason:
            header["shell_state"] = call.shell_state
        self.send_captured(call, header)

    def exit_code(self, call: Call) -> int | None:
        if call.status is not None:
            return procs.exit_code_of(call.status)
        if call.done and call.proc is not None and not call.reaper_exited:
            return None  # still running in the background
        return 128 + signal.SIGKILL

    def send_captured(self, call: Call, header: dict[str, Any]) -> None:
        """Answer the call with the head and tail it captured so far."""
        header["stdout"] = call.captures["stdout"].finish()
        header["stderr"] = call.captures["stderr"].finish()
        header["duration_ms"] = int((time.monotonic() - call.started) * 1000)
        body = bytes(call.captures["stdout"].head) + bytes(call.captures["stdout"].tail)
        body += bytes(call.captures["stderr"].head) + bytes(call.captures["stderr"].tail)
        call.captures.clear()
        self.send(header, body)

    def kill(self, call: Call, reason: str) -> None:
        if call.reason:
            return
        call.reason = reason
        grace = float(call.spec.get("grace_s", 0.5))
        call.hard_deadline = time.monotonic() + grace + 0.3
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

    def check_deadlines(self) -> float | None:
        now = time.monotonic()
        wait: float | None = None
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

    def next_check(self, call: Call) -> float | None:
        if call.settle_at is not None:
            return call.settle_at
        if call.status is not None:
            return None
        if call.idle_s:
            return min(call.deadline, call.last_output + call.idle_s)
        return call.deadline

    def run(self) -> None:
        self.send(
            {
                "op": "hello",
                "id": 0,
                "version": protocol.VERSION,
                "python": sys.version.split()[0],
                "pid": os.getpid(),
            }
        )
        while True:
            try:
                timeout = self.check_deadlines()
            except Exception as exc:  # noqa: BLE001 - keep serving the other calls
                print(f"agent: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                timeout = 0.05
            for key, _ in self.sel.select(timeout):
                try:
                    if not self.dispatch(key):
                        return
                except Exception as exc:  # noqa: BLE001 - keep serving the other calls
                    print(f"agent: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            try:
                self.on_children()
            except Exception as exc:  # noqa: BLE001 - keep serving the other calls
                print(f"agent: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    def dispatch(self, key: selectors.SelectorKey) -> bool:
        kind, data = key.data
        if kind == "proto":
            return self.on_proto()
        if kind == "wake":
            try:
                while os.read(self.wake_r, 512):
                    pass
            except (BlockingIOError, InterruptedError):
                pass
            self.on_children()
        elif kind == "out":
            self.on_output(key.fd, data)
        elif kind == "status":
            self.on_status(key.fd, data)
        elif kind == "state":
            self.read_state(data)
        elif kind == "stdin" and key.fd in self.sel.get_map():
            self.on_stdin(key.fd, data)
        return True


def main() -> None:
    os.umask(0o022)
    # Keep the protocol on private descriptors so nothing started later can
    # inherit fds 0/1 and speak (or listen) in the agent's name.
    proto_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 10)
    proto_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 10)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    os.set_blocking(proto_in, False)
    Agent(proto_in, proto_out).run()


if __name__ == "__main__":
    main()
