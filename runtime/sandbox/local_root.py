"""Builds the local backend's sandbox root, then becomes the agent.

Run by local.py as `unshare --mount --pid --net --uts --ipc --fork
--propagation private -- python3 -I local_root.py SPEC_JSON`: this script is
PID 1 of fresh namespaces whose mounts never propagate to the host. It

- mounts a tmpfs over /tmp (of this namespace only: nothing is created on
  the host, not even an empty directory) and builds the root R in it;
- bind-mounts the host's system directories read-only at R/usr, R/etc, ...
  (a top-level symlink such as /bin -> usr/bin is recreated as a symlink),
  and /dev without its submounts, with a private tmpfs at R/dev/shm;
- mounts tmpfs at R/workspace (the sandbox user's, size-capped) and R/tmp,
  the agent package read-only at R/opt/toolrt/agent, a fresh proc at R/proc;
- makes R itself read-only, chroots into it, keeps only the capabilities
  the agent needs (SETUID, SETGID, KILL; as in the Docker sandbox), and
  execs the agent, which is then PID 1: when it exits, the kernel kills
  everything left in the namespace.

Any failure is printed to stderr (the daemon's error message quotes it) and
ends the script with status 1. Stdlib only; runs with the daemon's Python.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import socket
import struct
import sys
from typing import Any

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND = 32, 4096
# statvfs flags with the same bits as mount flags: a read-only remount of a
# bind must keep them (the kernel refuses to clear a locked one).
KEPT_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048 | 4096
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
CAP_KILL, CAP_SETGID, CAP_SETUID = 5, 6, 7
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 1
# Top-level host directories the agent and ordinary commands need.
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")
ROOT = "/tmp"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
_libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4


def mount(source: str, target: str, fstype: str, flags: int, data: str = "") -> None:
    if _libc.mount(source.encode(), target.encode(), fstype.encode(), flags, data.encode()):
        err = ctypes.get_errno()
        msg = f"mount {source} ({fstype or 'bind'}) on {target}: {os.strerror(err)}"
        raise OSError(err, msg)


def open_dir(path: str) -> int:
    return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def bind_read_only(source: int, target: str) -> None:
    """The directory open at `source` at `target`, read-only, without the
    mounts below it (a recursive bind would bring them along writable)."""
    os.mkdir(target)
    mount(f"/proc/self/fd/{source}", target, "", MS_BIND)
    kept = os.statvfs(target).f_flag & KEPT_FLAGS
    mount("", target, "", MS_REMOUNT | MS_BIND | MS_RDONLY | kept)


def loopback_up() -> None:
    """The new network namespace's lo, up (Docker's `network none` has it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, SIOCGIFFLAGS, ifreq))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))


def build_root(spec: dict[str, Any]) -> None:
    links, binds = {}, {}
    # Every source is opened before the tmpfs hides /tmp: a checkout (and so
    # the agent package) may live there.
    for name in SYSTEM_DIRS:
        if os.path.islink(f"/{name}"):
            links[name] = os.readlink(f"/{name}")
        elif os.path.isdir(f"/{name}"):
            binds[f"/{name}"] = open_dir(f"/{name}")
    binds["/dev"] = open_dir("/dev")
    for path in spec["extra_read_only"]:
        binds[path] = open_dir(path)
    binds[spec["agent_mount"]] = open_dir(spec["agent_dir"])

    mount("tmpfs", ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for name, target in links.items():
        os.symlink(target, f"{ROOT}/{name}")
    for path, fd in binds.items():
        os.makedirs(os.path.dirname(ROOT + path), exist_ok=True)
        bind_read_only(fd, ROOT + path)
        os.close(fd)
    if os.path.isdir(f"{ROOT}/dev/shm"):
        mount("tmpfs", f"{ROOT}/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")
    uid, gid = spec["uid"], spec["gid"]
    for name, size, mode in (
        ("workspace", spec["workspace_bytes"], "0755"),
        ("tmp", spec["tmp_bytes"], "1777"),
    ):
        os.mkdir(f"{ROOT}/{name}")
        options = f"size={size},uid={uid},gid={gid},mode={mode}"
        mount("tmpfs", f"{ROOT}/{name}", "tmpfs", MS_NOSUID | MS_NODEV, options)
    os.mkdir(f"{ROOT}/proc")
    mount("proc", f"{ROOT}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount("", ROOT, "", MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def drop_privileges() -> None:
    """What the agent keeps after exec: SETUID, SETGID and KILL, nothing new."""
    for cap in range(64):
        if cap in (CAP_KILL, CAP_SETGID, CAP_SETUID):
            continue
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) and ctypes.get_errno() != errno.EINVAL:
            raise OSError(ctypes.get_errno(), f"cannot drop capability {cap}")
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0):
        raise OSError(ctypes.get_errno(), "cannot set no_new_privs")


def main() -> None:
    spec = json.loads(sys.argv[1])
    try:
        socket.sethostname("sandbox")
        loopback_up()
        build_root(spec)
        os.chdir(ROOT)
        os.chroot(".")
        os.chdir("/workspace")
        drop_privileges()
        argv = spec["argv"]
        os.execvpe(argv[0], argv, spec["env"])
    except OSError as exc:
        print(f"toolrt local sandbox: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
