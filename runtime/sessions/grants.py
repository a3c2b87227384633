"""What a tenant's permission keys grant a new session: other users, root's
capabilities and a writable root filesystem.

Unlike quotas (a key left out sets no ceiling), these are granted only by
the tenant's table (`[tenants.NAME]`, or `[tenants.default]` for a tenant
without one): no table, or the key left out, grants nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.config import Config
from runtime.constants import SANDBOX_UID
from runtime.errors import BadRequest, NotBoundedHere, PermissionDenied

ROOT_READ_ONLY = "read-only"
ROOT_WRITABLE = "writable"
# Runtimes that keep a writable root filesystem within the sandbox's memory
# (runsc with --overlay2=root:memory, registered by scripts/ensure-docker.sh).
# Docker's overlay2 over ext4 cannot bound it: `--storage-opt size` needs xfs
# with project quotas, so a writable root elsewhere could fill the host's disk.
BOUNDED_ROOT_RUNTIMES = ("runsc-overlay",)
# Names of the sandbox user: always allowed, never listed.
SANDBOX_NAMES = ("", "sandbox", str(SANDBOX_UID))
# Names of root, alike wherever users are compared.
ROOT_NAMES = ("root", "0")
# At most this many users per session, each at most this long.
MAX_USERS = 32
MAX_USER_CHARS = 64


@dataclass(frozen=True)
class Grant:
    users: list[str] = field(default_factory=list)
    root_capabilities: bool = False
    writable_root: bool = False


def same_user(a: str, b: str) -> bool:
    return a == b or (a in ROOT_NAMES and b in ROOT_NAMES)


def user_listed(user: str, users: list[str]) -> bool:
    """Whether `user` (as a program's request names it) is the sandbox user or in `users`."""
    return user in SANDBOX_NAMES or any(same_user(user, u) for u in users)


def grant(
    config: Config, tenant: str, users: list[str], root_filesystem: str, runtime: str
) -> Grant:
    """The session's users, root's capabilities and root filesystem, or the refusal."""
    if root_filesystem not in ("", ROOT_READ_ONLY, ROOT_WRITABLE):
        msg = (
            f"root_filesystem {root_filesystem[:40]!r}: expected "
            f"{ROOT_READ_ONLY!r} (the default) or {ROOT_WRITABLE!r}"
        )
        raise BadRequest(msg)
    asked = [u for u in dict.fromkeys(users) if u not in SANDBOX_NAMES]
    bad = [u for u in asked if not u or len(u) > MAX_USER_CHARS or not u.isprintable()]
    if bad or len(asked) > MAX_USERS:
        msg = (
            f"users: at most {MAX_USERS} names or uids of the image, each 1 to "
            f"{MAX_USER_CHARS} printable characters"
        )
        raise BadRequest(msg)
    quota = config.quota_of(tenant)
    granted = quota.users if quota is not None else []
    refused = [u for u in asked if not any(same_user(u, g) for g in granted)]
    if refused:
        names = ", ".join(repr(u) for u in refused)
        allowed = ", ".join(repr(u) for u in granted) or "none but the sandbox user"
        msg = (
            f"tenant {tenant} may not run programs as {names}; its users: {allowed} "
            "(granted by the tenant's `users` key)"
        )
        raise PermissionDenied(msg)
    writable = root_filesystem == ROOT_WRITABLE
    if writable and not (quota is not None and quota.writable_root):
        msg = (
            f'tenant {tenant} may not ask for root_filesystem "writable" '
            "(granted by the tenant's `writable_root` key)"
        )
        raise PermissionDenied(msg)
    if writable and runtime not in BOUNDED_ROOT_RUNTIMES:
        msg = (
            f'root_filesystem "writable" needs a runtime that bounds it '
            f"({', '.join(BOUNDED_ROOT_RUNTIMES)}: gVisor keeps the root overlay in "
            f"the sandbox's memory); runtime {runtime or 'the default'!r} stores it on "
            "overlay2 over ext4, where Docker cannot cap its size"
        )
        raise NotBoundedHere(msg)
    has_root = any(u in ROOT_NAMES for u in asked)
    capable = has_root and quota is not None and quota.root_capabilities
    return Grant(users=asked, root_capabilities=capable, writable_root=writable)
