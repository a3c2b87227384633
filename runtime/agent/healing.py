"""Sessions that heal: leftovers of earlier calls must not fill the sandbox.

A call answers when its main process exits; what it left running (`server &`,
or `:(){ :|:& };:`, whose bomb outlives the call that started it) keeps its
call's group (tracker.py). When the pids or memory limit is (nearly) full —
seen before a call starts, when a start fails with EAGAIN/ENOMEM, and once a
second on the loop — the agent stops the runaway leftover trees: groups that
hold a quarter of the limit or more, newest first, one at a time until the
pressure is gone. Never a call still running (the one being started
included); background processes started on purpose are stopped only when
they are the runaway. The next result's `note` names what was stopped.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Dict, List, Optional, Set, Tuple

from . import tracker

if TYPE_CHECKING:
    from .background import Registry
    from .calls import Call

PIDS, MEMORY = "pids", "memory"
# Room a call needs to start (launcher, bash, a pipeline): less is pressure.
PIDS_HEADROOM = 8
MEMORY_PRESSURE = 0.9
# A leftover holding this share of a limit is a runaway.
RUNAWAY_SHARE = 4
# Without a readable limit (some runtimes hide the cgroup), this many
# processes in one leftover tree make it a runaway.
RUNAWAY_PIDS_UNKNOWN_LIMIT = 64
CHECK_EVERY_S = 1.0
# How long stopped trees get to be reaped before a start is retried.
REAP_WAIT_S = 2.0
# Descriptions of calls kept to name them in notes.
LABELS_MAX = 4096

CGROUP_FILES = {
    PIDS: (
        ("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids/pids.current"),
        ("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids.current"),
    ),
    MEMORY: (
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
    ),
}


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def usage(kind: str) -> Tuple[Optional[int], Optional[int]]:
    """(limit, current) of the sandbox's cgroup for `kind`; None where unknown
    ("max", or no cgroup files, as under gVisor)."""
    for limit_path, current_path in CGROUP_FILES[kind]:
        current = _read_int(current_path)
        if current is not None:
            limit = _read_int(limit_path)
            # cgroup v1 says "no limit" with a huge number.
            return (limit if limit is not None and limit < 1 << 60 else None), current
    return None, None


def pressure() -> Optional[str]:
    """The limit that is (nearly) full, if one is."""
    limit, current = usage(PIDS)
    if limit is not None and current is not None and current + PIDS_HEADROOM > limit:
        return PIDS
    limit, current = usage(MEMORY)
    if limit is not None and current is not None and current >= limit * MEMORY_PRESSURE:
        return MEMORY
    return None


class Healer:
    """What the agent remembers to heal: which call each group was, notes not
    yet given to a result, when to look next."""

    def __init__(self) -> None:
        self.labels: Dict[int, str] = {}
        self.notes: List[str] = []
        self.next_check = 0.0

    def started(self, group: int, call_id: str) -> None:
        self.labels[group] = f"call {call_id!r}"
        if len(self.labels) > LABELS_MAX:
            for old in sorted(self.labels)[: LABELS_MAX // 2]:
                del self.labels[old]

    def take_notes(self) -> List[str]:
        notes, self.notes = self.notes, []
        return notes


class HealOps:
    """The agent's methods for relieving pressure; a mixin of `loop.Agent`."""

    calls: Dict[int, Call]
    background: Registry
    healer: Healer

    if TYPE_CHECKING:

        def on_children(self) -> None: ...

    def relieve(self, kind: Optional[str], also_keep: Optional[Set[int]] = None) -> bool:
        """Stop runaway leftover trees while `kind` is under pressure; whether
        any was stopped (its note waits in the healer)."""
        if kind is None:
            return False
        keep = set(also_keep or ()) | {c.group for c in self.calls.values()}
        on_purpose = {p.call.group for p in self.background.procs.values() if p.alive}
        limit, _ = usage(kind)
        census = tracker.census()
        threshold = (limit // RUNAWAY_SHARE) if limit else None
        if threshold is None:
            threshold = RUNAWAY_PIDS_UNKNOWN_LIMIT if kind == PIDS else 0
        runaways = [
            group
            for group, (count, rss) in census.items()
            if group not in keep and threshold and (count if kind == PIDS else rss) >= threshold
        ]
        stopped = False
        for group in sorted(runaways, reverse=True):  # groups grow: newest first
            count, rss = census[group]
            killed = tracker.stop_and_kill(group)
            self._reap(group)
            what = self.healer.labels.get(group, f"group {group}")
            held = f"{count} processes" if kind == PIDS else f"{rss >> 20} MiB"
            kept = " (a background process)" if group in on_purpose else ""
            self.healer.notes.append(
                f"the {kind} limit was nearly full: stopped {killed} leftover processes of "
                f"{what}{kept}, which held {held}"
            )
            stopped = True
            if pressure() != kind:
                break
        return stopped

    def stop_leftovers(self, keep: Set[int]) -> int:
        """Stop every process of a call group but `keep`'s, whatever it holds;
        how many were killed."""
        killed = 0
        for group in sorted(tracker.census()):
            if group not in keep:
                killed += tracker.stop_and_kill(group)
                self._reap(group)
        return killed

    def _reap(self, group: int) -> None:
        """Reap the stopped tree, so its pids are free before a retry."""
        until = time.monotonic() + REAP_WAIT_S
        while time.monotonic() < until:
            self.on_children()
            if not tracker.count({group}):
                return
            time.sleep(0.01)

    def check_pressure(self, now: float) -> float:
        """The loop's look at the limits, once a second; when to look next."""
        if now >= self.healer.next_check:
            self.relieve(pressure())
            self.healer.next_check = time.monotonic() + CHECK_EVERY_S
        return self.healer.next_check
