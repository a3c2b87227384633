"""Background processes of one sandbox.

Stdlib only, python3.9+ (imported by the in-sandbox agent). A call becomes a
background process when it is started with `background` or goes silent past
its idle timeout: the agent keeps its pipes and its group, and its output
goes to a ring buffer here instead of to the call's result. `Registry`
hands out the `p<N>` handles, enforces the cap on live processes and
forgets the oldest finished ones.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Dict, List, Optional

from . import protocol, terminal
from .ops import operation

if TYPE_CHECKING:
    from .calls import Call
    from .loop import Agent

# Finished processes kept for process_list / process_output, oldest dropped first.
KEEP_FINISHED = 16
COMMAND_SHOWN = 200


class Ring:
    """The newest `cap` bytes of a stream, and how far a reader has got."""

    def __init__(self, cap: int) -> None:
        self.cap = max(1, cap)
        self.buf = bytearray()
        self.total = 0
        self.read_pos = 0

    def add(self, data: bytes) -> None:
        self.buf += data
        self.total += len(data)
        # Trim in batches so a flood of small writes stays linear.
        if len(self.buf) > self.cap + 65536:
            del self.buf[: len(self.buf) - self.cap]

    def read(self, whole_chars: bool = False) -> tuple[bytes, int]:
        """Bytes written since the last read, and how many of them fell off
        the ring. With `whole_chars`, a UTF-8 character still being written
        waits for the next read instead of being cut in two."""
        if len(self.buf) > self.cap:
            del self.buf[: len(self.buf) - self.cap]
        start = self.total - len(self.buf)
        dropped = max(0, start - self.read_pos)
        data = bytes(self.buf[max(0, self.read_pos - start) :])
        if whole_chars:
            data = data[: len(data) - partial_utf8_tail(data)]
        self.read_pos = max(self.read_pos, start) + len(data)
        return data, dropped

    @property
    def unread(self) -> int:
        return self.total - self.read_pos


def partial_utf8_tail(data: bytes) -> int:
    """How many bytes at the end of `data` start a UTF-8 character not yet complete."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:
            continue  # a continuation byte: its lead is further back
        need = 4 if byte >= 0xF0 else 3 if byte >= 0xE0 else 2 if byte >= 0xC0 else 1
        return back if need > back else 0
    return 0


class Proc:
    """A call the agent kept running after answering it."""

    def __init__(self, process_id: str, call: Call, ring_cap: int) -> None:
        self.process_id = process_id
        self.call = call
        self.ring = Ring(ring_cap)
        self.command = call.request.command
        self.started = call.started
        self.ended: Optional[float] = None
        self.kill_waiters: List[int] = []

    @property
    def alive(self) -> bool:
        """Some process of its tree may still run (its group is not empty)."""
        return not self.call.tree_gone

    def state(self) -> str:
        """ "running" while any process of its tree runs (the main one may
        have exited: `cmd &` in a background command keeps it running)."""
        if self.call.reason:
            return "killed"
        return "running" if self.alive else "exited"

    def describe(self, exit_code: Optional[int]) -> protocol.ProcessInfo:
        end = self.ended if self.ended is not None else time.monotonic()
        shown = self.command
        if len(shown) > COMMAND_SHOWN:
            shown = shown[: COMMAND_SHOWN - 3] + "..."
        return protocol.ProcessInfo(
            process_id=self.process_id,
            pid=self.call.pid,
            command=shown,
            state=self.state(),
            exit_code=exit_code,
            runtime_s=round(end - self.started, 3),
            unread_bytes=self.ring.unread,
        )


class Registry:
    def __init__(self) -> None:
        self.procs: Dict[str, Proc] = {}
        self.counter = 0

    def live(self) -> int:
        return sum(1 for p in self.procs.values() if p.alive)

    def has_room(self, cap: int) -> bool:
        return self.live() < cap

    def adopt(self, call: Call, ring_cap: int) -> Proc:
        self.counter += 1
        proc = Proc(f"p{self.counter}", call, ring_cap)
        self.procs[proc.process_id] = proc
        finished = [p for p in self.procs.values() if not p.alive]
        for old in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            del self.procs[old.process_id]
        return proc

    def get(self, process_id: str) -> Optional[Proc]:
        return self.procs.get(process_id)


class BackgroundOps:
    """The agent's methods for background processes.

    A mixin of `agent.Agent`, kept here so the call loop stays readable; it
    uses the agent's `calls`, `send`, `fail`, `send_captured`, `exit_code`,
    `drain` and `kill`.
    """

    background: Registry
    calls: Dict[int, Call]

    if TYPE_CHECKING:

        def send(self, message: protocol.Message, rid: int, body: bytes = b"") -> None: ...
        def fail(self, rid: int, code: str, message: str) -> None: ...
        def exit_code(self, call: Call) -> Optional[int]: ...
        def send_captured(self, call: Call, result: protocol.ExecResult) -> None: ...
        def drain(self, call: Call) -> None: ...
        def kill(self, call: Call, reason: str) -> None: ...
        def settle_state(self, call: Call) -> None: ...
        def end_input(self, call: Call) -> None: ...

    def detach(self, call: Call, idle: bool) -> None:
        """Answer the call now and keep its processes running as a handle:
        without a deadline, unless an explicit timeout_s still bounds it."""
        if not (idle and call.request.deadline_after_idle):
            call.deadline = float("inf")
        call.done = True
        self.calls.pop(call.rid, None)
        proc = self.background.adopt(call, call.request.ring_cap)
        call.proc = proc
        exit_code = self.exit_code(call)
        result = protocol.ExecResult(
            call_id=call.request.call_id,
            exit_code=exit_code,
            idle=idle,
            background=proc.describe(exit_code),
        )
        self.send_captured(call, result)
        self.proc_update(proc)

    def proc_update(self, proc: Proc) -> None:
        call = proc.call
        if proc.ended is None and (call.status is not None or call.tree_gone):
            proc.ended = time.monotonic()
        # A kill is over when the tree is gone, or when the agent gave up
        # waiting for processes that outlive SIGKILL (deadlines.give_up).
        gave_up = call.reason and call.kill_at is None and call.give_up_at is None
        if call.tree_gone or gave_up:
            self.end_input(call)
            self.settle_state(call)
            waiters, proc.kill_waiters = proc.kill_waiters, []
            for rid in waiters:
                self.send_proc(rid, proc)

    def send_proc(
        self,
        rid: int,
        proc: Proc,
        body: bytes = b"",
        dropped_bytes: int = 0,
        was_running: bool = True,
    ) -> None:
        info = proc.describe(self.exit_code(proc.call))
        reply = protocol.ProcessReply(
            process=info, dropped_bytes=dropped_bytes, was_running=was_running
        )
        self.send(reply, rid, body)

    def find_proc(self, rid: int, process_id: str) -> Optional[Proc]:
        proc = self.background.get(process_id)
        if proc is None:
            known = ", ".join(self.background.procs) or "none"
            self.fail(
                rid,
                protocol.NOT_FOUND,
                f"no background process {process_id[:40]!r} (known handles: {known})",
            )
        return proc

    def on_silence(self, call: Call) -> None:
        cap = call.request.max_background
        if call.on_idle == "background" and self.background.has_room(cap):
            self.drain(call)
            if not call.done:
                self.detach(call, idle=True)
            return
        call.idle_cap_hit = call.on_idle == "background"
        self.kill(call, "idle")


@operation(protocol.ProcessList)
def op_process_list(agent: Agent, rid: int, request: protocol.ProcessList, body: bytes) -> None:
    listed = [p.describe(agent.exit_code(p.call)) for p in agent.background.procs.values()]
    agent.send(protocol.ProcessListReply(processes=listed), rid)


@operation(protocol.ProcessOutput)
def op_process_output(agent: Agent, rid: int, request: protocol.ProcessOutput, body: bytes) -> None:
    proc = agent.find_proc(rid, request.process_id)
    if proc is not None:
        data, dropped = proc.ring.read(whole_chars=proc.alive)
        agent.send_proc(rid, proc, data, dropped_bytes=dropped)


@operation(protocol.ProcessInput)
def op_process_input(agent: Agent, rid: int, request: protocol.ProcessInput, body: bytes) -> None:
    proc = agent.find_proc(rid, request.process_id)
    if proc is None:
        return
    fd = proc.call.input_fd
    if fd < 0:
        why = "has ended" if proc.call.request.tty else "has no terminal"
        agent.fail(
            rid,
            protocol.INVALID_ARGUMENTS,
            f"background process {proc.process_id} {why}: type only into a running one "
            "started by shell with background: true and tty: true",
        )
        return
    try:
        written = terminal.type_into(fd, body)
    except OSError as exc:
        agent.fail(rid, protocol.INVALID_ARGUMENTS, f"its terminal is closed: {exc.strerror}")
        return
    agent.send(protocol.InputWritten(written=written), rid)


@operation(protocol.ProcessKill)
def op_process_kill(agent: Agent, rid: int, request: protocol.ProcessKill, body: bytes) -> None:
    proc = agent.find_proc(rid, request.process_id)
    if proc is None:
        return
    if not proc.alive:
        agent.send_proc(rid, proc, was_running=False)
        return
    proc.kill_waiters.append(rid)
    agent.kill(proc.call, "killed")


@operation(protocol.StopLeftovers)
def op_stop_leftovers(agent: Agent, rid: int, request: protocol.StopLeftovers, body: bytes) -> None:
    spare_group = agent.drop_spare()
    keep = {c.group for c in agent.calls.values()}
    keep |= {p.call.group for p in agent.background.procs.values() if p.alive}
    if spare_group is not None:
        keep.add(spare_group)  # killed already: toolrt's own, not counted
    agent.send(protocol.LeftoversStopped(processes=agent.stop_leftovers(keep)), rid)
