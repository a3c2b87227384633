"""toolrt's in-sandbox agent: the container's main process.

Started by `python3 -I /opt/toolrt/agent/main.py`, as root with only SETUID,
SETGID and KILL. It speaks framed messages (protocol.py) over the container's
attached stdin/stdout and dispatches each request to the operation
registered for it (ops.py; the families are calls, background and files).
One thread, one selector loop: it never needs to fork or start a thread to
kill, so it still answers under a fork bomb. As PID 1 it is the parent of
every command and inherits every orphan, and reaps them all. When stdin
closes it exits, and the container with it; a daemon that goes away
without closing it (Docker keeps a container's stdin open across attaches)
finds the agent still running its calls and keeping their answers
(results.py) when it attaches again.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import fcntl
import os
import selectors
import signal
import sys
import threading
from typing import Dict, List, Optional, Tuple

from . import (
    background,
    calls,
    deadlines,
    file_ops,
    flow,
    healing,
    procs,
    program_files,
    programs,
    protocol,
    relay,
    results,
    state,
    tracker,
)
from .ops import OPERATIONS, operation

# Imported for their registrations: every family's operations are known
# before the first request is read.
_FAMILIES = (background, calls, file_ops, program_files, programs, relay, results)


class Agent(
    programs.ProgramOps,
    deadlines.TreeOps,
    background.BackgroundOps,
    state.StateOps,
    healing.HealOps,
    results.ResultOps,
):
    def __init__(self, proto_in: int, proto_out: int) -> None:
        self.proto_in = proto_in
        self.proto_out = proto_out
        self.decoder = protocol.Decoder()
        # The daemon's epoch from its latest hello, echoed in every frame.
        self.epoch = 0
        self.sel = selectors.DefaultSelector()
        # Unanswered calls by request id; calls by their unreaped main process.
        self.calls: Dict[int, calls.Call] = {}
        self.by_pid: Dict[int, calls.Call] = {}
        self.groups = tracker.Groups()
        self.next_tree_check = 0.0
        # File and archive operations running on their threads, by request id.
        self.file_ops: Dict[int, threading.Event] = {}
        # Their transfers' chunks and credits, by request id (flow.py).
        self.flows: Dict[int, flow.Flow] = {}
        # Those threads answer too: one frame at a time on the wire.
        self.send_lock = threading.Lock()
        self.background = background.Registry()
        # Network egress (relay.py), started when a session has network.
        self.relay: Optional[relay.Relay] = None
        self.healer = healing.Healer()
        # Answers kept until acknowledged, running calls by call id, and
        # later daemons' requests waiting for them (results.py).
        self.kept = results.Kept()
        self.running: Dict[str, calls.Call] = {}
        self.waiters: Dict[str, List[Tuple[int, int]]] = {}
        self.resync_asked = False
        self.wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGUSR1, self._on_resync_signal)
        # A program run as root shares the agent's uid, so it may signal it:
        # none of these may end or stop it (under gVisor the kernel does not
        # shield the container's init). Commands start with them at their
        # defaults (procs.RESET_SIGNALS); the daemon removes sandboxes with KILL.
        for sig in procs.IGNORED_BY_AGENT:
            signal.signal(sig, signal.SIG_IGN)
        self.sel.register(self.wake_r, selectors.EVENT_READ, ("wake", None))
        self.sel.register(proto_in, selectors.EVENT_READ, ("proto", None))

    def _on_resync_signal(self, *_: object) -> None:
        # Acted on in the loop (the wakeup fd woke it), never in the handler.
        self.resync_asked = True

    # -- protocol ---------------------------------------------------------
    def send(
        self, message: protocol.Message, rid: int, body: bytes = b"", epoch: Optional[int] = None
    ) -> None:
        """One frame to the daemon of `epoch` (default: the latest hello's)."""
        epoch = self.epoch if epoch is None else epoch
        try:
            frame = protocol.encode(message, rid, epoch, body)
        except protocol.FrameError as exc:
            # An answer too large for a frame still ends its request, saying so.
            failure = protocol.Failure(message=f"the agent's {message.OP!r} answer: {exc}")
            frame = protocol.encode(failure, rid, epoch)
        data = memoryview(frame)
        with self.send_lock:
            while data:
                try:
                    n = os.write(self.proto_out, data)
                except InterruptedError:
                    continue
                data = data[n:]

    def fail(self, rid: int, code: str, message: str) -> None:
        self.send(protocol.Failure(code=code, message=message), rid)

    def on_proto(self) -> bool:
        try:
            data = os.read(self.proto_in, 1 << 20)
        except (BlockingIOError, InterruptedError):
            return True
        if not data:
            return False
        for frame in self.decoder.feed(data):
            self.dispatch_request(frame)
        return True

    def dispatch_request(self, frame: protocol.Frame) -> None:
        if frame.op == protocol.Hello.OP:
            self.epoch = frame.epoch
        elif frame.epoch != self.epoch:
            return  # written by an earlier daemon: nobody waits for its answer
        entry = OPERATIONS.get(frame.op)
        if entry is None:
            self.fail(frame.request_id, protocol.INTERNAL, f"unknown op {frame.op[:40]!r}")
            return
        request_type, handler = entry
        try:
            request = frame.as_type(request_type)
            handler(self, frame.request_id, request, frame.body)
        except Exception as exc:  # noqa: BLE001 - one bad request must not end the agent
            self.fail(frame.request_id, protocol.INTERNAL, f"{type(exc).__name__}: {exc}")

    def run(self) -> None:
        while True:
            try:
                timeout = self.check_deadlines()
            except Exception as exc:  # noqa: BLE001 - keep serving the other calls
                print(f"agent: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                timeout = 0.05
            if self.spare_wanted() and not self.sel.select(0):
                # Idle, nothing waiting: the next call's shell starts now.
                self.start_spare()
            for key, _ in self.sel.select(timeout):
                try:
                    if not self.dispatch(key):
                        return
                except Exception as exc:  # noqa: BLE001 - keep serving the other calls
                    print(f"agent: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                    self.on_crash(key.data[1], exc)
            try:
                self.on_children()
            except Exception as exc:  # noqa: BLE001 - keep serving the other calls
                print(f"agent: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    def on_crash(self, data: object, exc: Exception) -> None:
        """An event of a call failed in the agent: that call ends with an
        honest INTERNAL answer rather than never."""
        call = data[0] if isinstance(data, list) else data
        if isinstance(call, calls.Call):
            self.abort(call, f"the agent failed on this call: {type(exc).__name__}: {exc}")

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
            if self.resync_asked:
                self.resync_asked = False
                self.resync()
            self.on_children()
        elif kind == "out":
            self.on_output(key.fd, data)
        elif kind == "report":
            self.on_report(key.fd, data)
        elif kind == "state":
            self.read_state(data)
        elif kind == "stdin" and key.fd in self.sel.get_map():
            self.on_stdin(key.fd, data)
        elif kind == "input":
            self.on_input(key.fd, data)
        return True


@operation(protocol.Hello)
def op_hello(agent: Agent, rid: int, request: protocol.Hello, body: bytes) -> None:
    agent.send(
        protocol.HelloReply(
            version=protocol.VERSION,
            python=sys.version.split()[0],
            pid=os.getpid(),
            running=sorted(agent.running),
            unacked=list(agent.kept.answers),
        ),
        rid,
    )


@operation(protocol.Ping)
def op_ping(agent: Agent, rid: int, request: protocol.Ping, body: bytes) -> None:
    agent.send(protocol.Pong(), rid)


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
    if os.getpid() != 1:
        become_subreaper()
    Agent(proto_in, proto_out).run()


def become_subreaper() -> None:
    """Outside a container the orphans of commands should still come to the
    agent, to be reaped; best effort (calls are tracked by group anyway)."""
    import ctypes

    pr_set_child_subreaper = 36
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0)


if __name__ == "__main__":
    main()
