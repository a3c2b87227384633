"""Which processes belong to which call, and stopping a call's whole tree.

Every command starts with a supplementary group of its own call, set by the
root launcher (procs.py) before it drops to the sandbox user. A process
without CAP_SETGID cannot shed it and no other process can hand it out
(groups come only from the root agent; no-new-privileges and nosuid mounts
make setgid files inert), so it survives setsid, double forks, `env -i` and
re-parenting: `/proc/<pid>/status` `Groups:` says which call a process
belongs to. This needs no PR_SET_CHILD_SUBREAPER (refused under gVisor): the
agent is PID 1, inherits every orphan and reaps it.

Killing a tree does not race it: every member is stopped (SIGSTOP, repeated
until a pass finds no new one; a stopped process cannot fork, and stopped
processes free the CPU the agent shares with them), then killed (SIGKILL,
repeated until a pass finds no member it has not killed: a fork that was
under way when its parent was stopped ends with the child visible).

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import os
import signal
from typing import Dict, Iterable, Iterator, Set, Tuple

# Far above the groups images define (Debian allocates below 60000); above
# the highest one in /etc/group if an image goes higher.
GROUP_BASE = 200_000


class Groups:
    """Hands out one group per call, never the same twice, never a group of
    the image."""

    def __init__(self, base: int = GROUP_BASE, group_file: str = "/etc/group") -> None:
        self.next = max(base, highest_group(group_file) + 1)

    def allocate(self) -> int:
        group = self.next
        self.next += 1
        return group


def highest_group(path: str) -> int:
    highest = 0
    try:
        with open(path, "rb") as f:
            for line in f:
                fields = line.split(b":")
                if len(fields) > 2 and fields[2].strip().isdigit():
                    highest = max(highest, int(fields[2]))
    except OSError:
        pass
    return highest


def _statuses() -> Iterator[Tuple[int, bytes]]:
    """(pid, /proc/<pid>/status) of every process, one pass over /proc;
    processes that end while it runs are skipped."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                yield int(name), f.read()
        except OSError:
            continue


def processes() -> Iterator[Tuple[int, Set[int], bool]]:
    """(pid, supplementary groups, is a zombie) of every process."""
    for pid, status in _statuses():
        groups = _field(status, b"Groups:")
        state = _field(status, b"State:")
        yield pid, {int(g) for g in groups.split()}, state[:1] in (b"Z", b"X")


def census(base: int = GROUP_BASE) -> Dict[int, Tuple[int, int]]:
    """Per call group (>= base): its processes (zombies included) and the
    bytes of memory they hold (resident set)."""
    found: Dict[int, Tuple[int, int]] = {}
    for _, status in _statuses():
        rss = _field(status, b"VmRSS:").split()
        held = int(rss[0]) * 1024 if rss and rss[0].isdigit() else 0
        for group in (int(g) for g in _field(status, b"Groups:").split()):
            if group >= base:
                count, total = found.get(group, (0, 0))
                found[group] = (count + 1, total + held)
    return found


def _field(status: bytes, key: bytes) -> bytes:
    at = status.find(b"\n" + key)
    if at < 0:
        return b""
    start = at + 1 + len(key)
    end = status.find(b"\n", start)
    return status[start : end if end >= 0 else len(status)]


def count(groups: Set[int]) -> Dict[int, int]:
    """How many processes (zombies included) each of `groups` has."""
    found: Dict[int, int] = {}
    for _, member_of, _ in processes():
        for group in member_of & groups:
            found[group] = found.get(group, 0) + 1
    return found


def signal_group(group: int, sig: int, also: Iterable[int] = ()) -> int:
    """Send `sig` to every live process of `group`, and to `also` (a launcher
    that may not have taken its group yet); how many were signalled."""
    sent = 0
    for pid in set(also):
        sent += _send(pid, sig)
    for pid, member_of, zombie in processes():
        if group in member_of and not zombie:
            sent += _send(pid, sig)
    return sent


def stop_and_kill(group: int, also: Iterable[int] = ()) -> int:
    """Stop every process of `group` (and `also`), then kill them all; how
    many were killed. Their exit is for the agent (PID 1) to reap."""
    stopped = _until_no_new(group, signal.SIGSTOP, set(also))
    killed = _until_no_new(group, signal.SIGKILL, set(also))
    return max(len(stopped), len(killed))


def _until_no_new(group: int, sig: int, also: Set[int]) -> Set[int]:
    """Signal members as each pass finds them, until a pass finds none new."""
    done: Set[int] = set()
    for pid in also:
        _send(pid, sig)
        done.add(pid)
    while True:
        new = 0
        for pid, member_of, zombie in processes():
            if group in member_of and not zombie and pid not in done:
                _send(pid, sig)
                done.add(pid)
                new += 1
        if not new:
            return done


def _send(pid: int, sig: int) -> int:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return 0
    return 1
