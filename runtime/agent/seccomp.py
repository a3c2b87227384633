"""The syscall filter every command runs under, on top of the engine's.

The engine's seccomp profile differs between versions (Docker 20.10's
default allows io_uring), so the launcher (spawn.c, or procs.spawn_fork)
installs a small filter of our own right before it execs bash. Filters
stack: the kernel runs every installed filter and the strictest answer
wins, so the engine's profile still applies and this one can only refuse
more. It refuses, whatever the engine allows:

- io_uring_setup, io_uring_enter, io_uring_register (a large share of
  recent kernel privilege escalations);
- bpf, userfaultfd, perf_event_open, keyctl, add_key, request_key, mount,
  umount2 (refused by Docker's default too; here on every engine version);
- unshare and clone with CLONE_NEWUSER (user namespaces), and clone3
  (its flags sit behind a pointer a filter cannot read; ENOSYS makes libc
  fall back to clone, as under Docker's profile);
- on x86-64, the x32 ABI; any architecture but the agent's own (32-bit
  binaries do not run in the sandbox);
- socket and socketpair of any address family but AF_UNIX, AF_INET,
  AF_INET6 and AF_NETLINK's NETLINK_ROUTE (libc's getaddrinfo, `ip`): no
  vsock (not namespaced: on a VM host it reaches the hypervisor's side
  whatever the network says), packet, bluetooth, the crypto API, other
  netlink protocols (audit, uevents, sock_diag: `ss` reads /proc instead)...

Everything refused answers EPERM (clone3: ENOSYS; a refused family
EAFNOSUPPORT and a refused netlink protocol EPROTONOSUPPORT, what a kernel
without them answers, so programs fall back as they would there). The program is built
here once, as bytes: the fork path installs it through prctl, the C helper
receives it in hex on its command line. The agent runs under it too
(confine_agent): gVisor (release 2022-12-19) applies the engine's profile
but ignores its errno values, so clone3 answers EPERM there instead of
ENOSYS, and libc, which falls back to clone only on ENOSYS, can then start
neither a thread nor a posix_spawn; stacked later, this filter's answer
wins.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import errno
import os
import struct
from typing import Dict, List, Optional, Tuple, Union

# linux/filter.h, linux/seccomp.h, linux/audit.h
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_JGE_K = 0x35
BPF_JSET_K = 0x45
BPF_RET_K = 0x06
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0 = 0, 4, 16  # seccomp_data, little-endian
X32_SYSCALL_BIT = 0x40000000
CLONE_NEWUSER = 0x10000000
INSTRUCTION = struct.Struct("=HBBI")

# Per architecture: its audit value and the numbers of the syscalls concerned.
ARCHES: Dict[str, Tuple[int, Dict[str, int]]] = {
    "x86_64": (
        0xC000003E,
        {
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "bpf": 321,
            "userfaultfd": 323,
            "perf_event_open": 298,
            "keyctl": 250,
            "add_key": 248,
            "request_key": 249,
            "mount": 165,
            "umount2": 166,
            "unshare": 272,
            "clone": 56,
            "clone3": 435,
            "socket": 41,
            "socketpair": 53,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "bpf": 280,
            "userfaultfd": 282,
            "perf_event_open": 241,
            "keyctl": 219,
            "add_key": 217,
            "request_key": 218,
            "mount": 40,
            "umount2": 39,
            "unshare": 97,
            "clone": 220,
            "clone3": 435,
            "socket": 198,
            "socketpair": 199,
        },
    ),
}
REFUSED = (
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "bpf",
    "userfaultfd",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "mount",
    "umount2",
)
# Refused only when their first argument asks for a user namespace.
FLAGGED = ("unshare", "clone")
# Refused unless their first argument is one of FAMILIES (linux/socket.h)
# and, for AF_NETLINK, their third NETLINK_ROUTE.
SOCKETS = ("socket", "socketpair")
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, NETLINK_ROUTE = 1, 2, 10, 16, 0
FAMILIES = (AF_UNIX, AF_INET, AF_INET6)
OFFSET_ARG2 = OFFSET_ARG0 + 16

DENY, ENOSYS, CHECK_FLAGS = "deny", "enosys", "flags"
CHECK_FAMILY, ALLOW = "family", "allow"
NO_FAMILY, NO_PROTOCOL = "eafnosupport", "eprotonosupport"
# A jump is an offset, or a label resolved once the program is laid out.
Jump = Union[int, str]
Insn = Tuple[int, int, Jump, Jump]


def _insn(code: int, k: int, jt: Jump = 0, jf: Jump = 0) -> Insn:
    return code, k, jt, jf


def program(machine: Optional[str] = None) -> bytes:
    """The filter for `machine` (default: this one) as struct sock_filter
    bytes; ValueError for an architecture it does not know."""
    machine = machine or os.uname().machine
    if machine not in ARCHES:
        msg = f"no syscall filter for architecture {machine!r}; known: {sorted(ARCHES)}"
        raise ValueError(msg)
    arch, numbers = ARCHES[machine]
    body: List[Insn] = [
        _insn(BPF_LD_W_ABS, OFFSET_ARCH),
        _insn(BPF_JEQ_K, arch, 0, DENY),
        _insn(BPF_LD_W_ABS, OFFSET_NR),
    ]
    if machine == "x86_64":
        body.append(_insn(BPF_JGE_K, X32_SYSCALL_BIT, DENY, 0))
    body += [_insn(BPF_JEQ_K, numbers[name], DENY, 0) for name in REFUSED]
    body.append(_insn(BPF_JEQ_K, numbers["clone3"], ENOSYS, 0))
    body += [_insn(BPF_JEQ_K, numbers[name], CHECK_FLAGS, 0) for name in FLAGGED]
    body += [_insn(BPF_JEQ_K, numbers[name], CHECK_FAMILY, 0) for name in SOCKETS]
    body.append(_insn(BPF_RET_K, RET_ALLOW))
    # The checks of arguments, then the answers they jump to (BPF jumps
    # only forward).
    labels = {CHECK_FLAGS: len(body)}
    body += [
        _insn(BPF_LD_W_ABS, OFFSET_ARG0),
        _insn(BPF_JSET_K, CLONE_NEWUSER, DENY, ALLOW),
    ]
    labels[CHECK_FAMILY] = len(body)
    body.append(_insn(BPF_LD_W_ABS, OFFSET_ARG0))
    body += [_insn(BPF_JEQ_K, family, ALLOW, 0) for family in FAMILIES]
    body += [
        _insn(BPF_JEQ_K, AF_NETLINK, 0, NO_FAMILY),
        _insn(BPF_LD_W_ABS, OFFSET_ARG2),
        _insn(BPF_JEQ_K, NETLINK_ROUTE, ALLOW, NO_PROTOCOL),
    ]
    for label, answer in (
        (ALLOW, RET_ALLOW),
        (DENY, RET_ERRNO | errno.EPERM),
        (ENOSYS, RET_ERRNO | errno.ENOSYS),
        (NO_FAMILY, RET_ERRNO | errno.EAFNOSUPPORT),
        (NO_PROTOCOL, RET_ERRNO | errno.EPROTONOSUPPORT),
    ):
        labels[label] = len(body)
        body.append(_insn(BPF_RET_K, answer))
    out = b""
    for at, (code, k, jt, jf) in enumerate(body):
        jumps = [labels[j] - at - 1 if isinstance(j, str) else j for j in (jt, jf)]
        out += INSTRUCTION.pack(code, jumps[0], jumps[1], k)
    return out


def install(filter_program: bytes) -> None:
    """Install `filter_program` on the calling thread (no_new_privs first, so
    no capability is needed); OSError when the kernel refuses."""
    import ctypes  # only the fork path needs it

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    prog = Fprog(len(filter_program) // INSTRUCTION.size, filter_program)
    if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def confine_agent() -> None:
    """Put the calling process under the filter, before it starts any thread
    (those inherit it); best effort: without it only gVisor is hampered."""
    try:
        install(program())
    except (OSError, ValueError):
        pass
