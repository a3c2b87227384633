"""When calls end: deadlines, silence, killing, and the end of process trees.

The agent reaps every child and orphan (it is PID 1) and reads each call's
group in /proc (tracker.py) to know when a tree is gone: after a reap (the
last process of a tree always ends as the agent's child: its ancestors in
the call are gone), and now and then as a safety net. A kill sends TERM
to the whole group, then after the call's grace stops and kills whatever is
left, and the call is answered once its tree is gone.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Dict, List, Optional

from . import tracker
from .background import Registry

if TYPE_CHECKING:
    from .calls import Call

# How long after the final kill a call waits for its tree before it is
# answered anyway (processes stuck in the kernel die when they leave it).
GIVE_UP_S = 2.0
# How often trees are looked at: while one is being killed, otherwise.
KILL_POLL_S = 0.02
TREE_POLL_S = 2.0
# At most one look per this interval after reaps (an orphan factory must
# not make the agent scan /proc nonstop).
MIN_GAP_S = 0.05


class TreeOps:
    """The agent's methods for deadlines and process trees.

    A mixin of `loop.Agent`; it uses calls.CallOps (maybe_finish, finish,
    drain, abort) and background.BackgroundOps (detach, on_silence).
    """

    calls: Dict[int, Call]
    by_pid: Dict[int, Call]
    background: Registry
    next_tree_check: float

    if TYPE_CHECKING:

        def maybe_finish(self, call: Call) -> None: ...
        def finish(self, call: Call) -> None: ...
        def drain(self, call: Call) -> None: ...
        def detach(self, call: Call, idle: bool) -> None: ...
        def on_silence(self, call: Call) -> None: ...
        def read_report(self, call: Call) -> None: ...
        def settle_state(self, call: Call) -> None: ...
        def read_state(self, call: Call, most: int = 64) -> None: ...
        def abort(self, call: Call, message: str) -> None: ...
        def check_pressure(self, now: float) -> float: ...
        def spare_reaped(self, pid: int) -> None: ...

    def kill(self, call: Call, reason: str) -> None:
        """TERM every process of the call now; stop and kill what is left
        after its grace (check_deadlines)."""
        if call.reason:
            return
        now = time.monotonic()
        call.reason = reason
        call.kill_at = now + call.request.grace_s
        call.give_up_at = call.kill_at + GIVE_UP_S
        tracker.signal_group(call.group, signal.SIGTERM, self.unreaped(call))
        self.next_tree_check = now
        self.maybe_finish(call)

    @staticmethod
    def unreaped(call: Call) -> List[int]:
        """The main process, when it is still the agent's child (its pid
        cannot have been reused): it may not carry the group yet."""
        return [call.pid] if call.pid and call.status is None else []

    def on_children(self) -> None:
        reaped = False
        while True:
            try:
                # Look before reaping: a call's shell must be read while its
                # pid cannot belong to anyone else (state.py trusts the pid).
                child = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                break
            if child is None or not child.si_pid:
                break
            call = self.by_pid.pop(child.si_pid, None)
            if call is not None:
                self.read_state(call, most=4096)
            pid, status = os.waitpid(child.si_pid, 0)
            reaped = True
            if call is None:
                self.spare_reaped(pid)
            if call is not None:
                call.status = status
                self.read_report(call)  # closed with the launcher: read to its end
                self.settle_state(call)
                self.maybe_finish(call)
        if reaped and self.watched():
            self.next_tree_check = min(self.next_tree_check, time.monotonic() + MIN_GAP_S)

    def watched(self) -> List[Call]:
        """Calls whose main process is gone but whose tree's end matters:
        unanswered ones, and background processes. (While the main process
        runs the tree is not gone; its reap starts the watch.)"""
        calls = list(self.calls.values())
        calls += [p.call for p in self.background.procs.values() if p.alive]
        return [c for c in calls if c.status is not None and not c.tree_gone]

    def check_trees(self, now: float) -> None:
        watched = self.watched()
        counts = tracker.count({c.group for c in watched}) if watched else {}
        for call in watched:
            if not counts.get(call.group):
                call.tree_gone = True
                self.maybe_finish(call)
        killing = any(c.reason and not c.tree_gone for c in watched)
        self.next_tree_check = now + (KILL_POLL_S if killing else TREE_POLL_S)

    def check_deadlines(self) -> Optional[float]:
        """Act on every deadline that passed; seconds until the next one."""
        now = time.monotonic()
        wake: List[float] = []
        calls = list(self.calls.values())
        calls += [p.call for p in self.background.procs.values() if p.alive]
        for call in calls:
            try:
                nxt = self.step(call, now)
            except Exception as exc:  # noqa: BLE001 - one call's failure ends that call only
                print(f"agent: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                self.abort(call, f"the agent failed on this call: {type(exc).__name__}: {exc}")
                continue
            if nxt is not None:
                wake.append(nxt)
        if self.watched():
            if now >= self.next_tree_check:
                self.check_trees(now)
            wake.append(self.next_tree_check)
        wake.append(self.check_pressure(now))
        return max(0.0, min(wake) - now) if wake else None

    def step(self, call: Call, now: float) -> Optional[float]:
        """Act on `call`'s deadlines; when it next needs a look."""
        if call.reason:
            if call.kill_at is not None and now >= call.kill_at:
                call.kill_at = None
                tracker.stop_and_kill(call.group, self.unreaped(call))
                self.next_tree_check = now
            if call.give_up_at is not None and now >= call.give_up_at and not call.tree_gone:
                call.give_up_at = None
                self.give_up(call)
            pending = [t for t in (call.kill_at, call.give_up_at) if t is not None]
            return min(pending) if pending else None
        if call.done:
            # A background process: only one moved there when silent, whose
            # caller set timeout_s, still has a deadline (background.detach).
            if now >= call.deadline:
                self.kill(call, "deadline")
                return now
            return call.deadline if call.deadline != float("inf") else None
        if call.settle_at is not None:
            if now >= call.settle_at:
                self.drain(call)
                if not call.done:
                    self.detach(call, idle=False)
                return None
            return call.settle_at
        if call.status is not None:
            return None  # ended: waiting for its output or its launcher's report
        if now >= call.deadline:
            self.kill(call, "deadline")
            return now
        if call.idle_s and now >= call.last_output + call.idle_s:
            self.on_silence(call)
            return now  # moved or being killed: its next deadline is another
        if call.idle_s:
            return min(call.deadline, call.last_output + call.idle_s)
        return call.deadline

    def give_up(self, call: Call) -> None:
        """The tree outlived its final kill by GIVE_UP_S: answer without it."""
        print(f"agent: call {call.rid}: processes outlive SIGKILL", file=sys.stderr, flush=True)
        if call.done:
            self.maybe_finish(call)  # a background process: its kill waiters
            return
        self.drain(call)
        self.finish(call)
