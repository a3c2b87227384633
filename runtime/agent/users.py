"""Who a program or a file operation runs as, and what root may do there.

`user` names a user of the sandbox's /etc/passwd, by name or uid (a bare
uid it lacks runs with the same gid); "" is the sandbox user. The daemon
has already checked that the session may use it (sessions/grants.py).

Root in a sandbox has no capabilities unless its session grants them,
and then exactly ROOT_CAPABILITIES: the launcher (spawn.c, or
procs.spawn_fork) sets the program's permitted set before its exec, and
no-new-privileges keeps the exec from adding any (a root exec otherwise
gets the whole bounding set). A file operation as root lowers the
effective set of its own thread only (capset applies to the calling
thread), and raises it back afterwards.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import pwd
from typing import Any, NamedTuple

from .protocol import SANDBOX_GID, SANDBOX_UID, USER_NOT_ALLOWED

# CHOWN, DAC_OVERRIDE, FOWNER, FSETID, SETGID, SETUID (bits 0, 1, 3, 4, 6, 7):
# enough for adduser and for owning files, nothing reaching past the sandbox.
ROOT_CAPABILITIES = (1 << 0) | (1 << 1) | (1 << 3) | (1 << 4) | (1 << 6) | (1 << 7)
# capget and capset by architecture.
CAPABILITY_SYSCALLS = {"x86_64": (125, 126), "aarch64": (90, 91)}
# _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set.
CAPABILITY_VERSION = 0x20080522
LAST_UID = (1 << 31) - 1


class Who(NamedTuple):
    uid: int
    gid: int
    # Root's capabilities (a mask of the first 32); 0 for anyone else.
    capabilities: int = 0

    def launcher_uid(self) -> str:
        """The launcher's UID argument: `uid`, or `0:MASK` for root (hex)."""
        return f"0:{self.capabilities:x}" if self.uid == 0 else str(self.uid)


SANDBOX = Who(SANDBOX_UID, SANDBOX_GID)


class UnknownUser(Exception):
    code = USER_NOT_ALLOWED

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def resolve(user: str, capabilities: bool) -> Who:
    """The uid, gid and (for root) capabilities `user` runs with."""
    if not user:
        return SANDBOX
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
        uid, gid = entry.pw_uid, entry.pw_gid
    except (KeyError, ValueError, OverflowError):
        if not user.isdigit() or int(user) > LAST_UID:
            msg = f"user {user[:64]!r}: no such user in the sandbox's /etc/passwd"
            raise UnknownUser(msg) from None
        uid = gid = int(user)
    return Who(uid, gid, ROOT_CAPABILITIES if uid == 0 and capabilities else 0)


def _capability_calls() -> tuple[Any, int, int]:
    import ctypes
    import os

    numbers = CAPABILITY_SYSCALLS.get(os.uname().machine)
    if numbers is None:
        msg = f"no capability calls known on {os.uname().machine!r}"
        raise OSError(msg)
    return ctypes.CDLL(None, use_errno=True), numbers[0], numbers[1]


def _change(effective: int, permitted: int) -> int:
    """Set the calling thread's effective and permitted capabilities to these
    masks (each within what it holds: capset never adds); the effective mask
    it had."""
    import ctypes

    libc, capget, capset = _capability_calls()
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION, 0)
    # effective, permitted, inheritable; twice (the low and high 32 bits).
    data = (ctypes.c_uint32 * 6)()
    if libc.syscall(capget, header, data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    before = data[0]
    data[1] &= permitted
    data[0] = effective & data[1]
    data[2] = data[3] = data[4] = data[5] = 0
    if libc.syscall(capset, header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    return before


def set_effective(mask: int) -> int:
    """Make the calling thread's effective capabilities `mask` (its permitted
    set stays, so it can raise them back); the mask they were before."""
    return _change(mask, 0xFFFFFFFF)


def drop_to(mask: int) -> None:
    """Keep only `mask` of the calling process's capabilities, permitted and
    effective (the fork launcher, right before its exec as root)."""
    _change(mask, mask)
