"""Dangerous syscalls are refused inside every sandbox, whatever the engine's
profile allows: the launcher's own filter (runtime/agent/seccomp.py) stacks
on it. Each syscall is made directly (python3 + ctypes), so libc cannot
answer for the kernel."""

from __future__ import annotations

import json

import pytest

from tests.conftest import under_gvisor

pytestmark = pytest.mark.docker

# name, x86-64 number, arguments: each would do something (or fail for
# another reason than EPERM) if the kernel let it through.
PROBE = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER = 0x10000000
calls = {
    "io_uring_setup": (425, 8, ctypes.create_string_buffer(120)),
    "io_uring_enter": (426, 0, 0, 0, 0, 0, 0),
    "io_uring_register": (427, 0, 0, 0, 0),
    "userfaultfd": (323, 0),
    "bpf": (321, 0, 0, 0),
    "perf_event_open": (298, ctypes.create_string_buffer(128), 0, -1, -1, 0),
    "keyctl": (250, 0, 0, 0, 0, 0),
    "add_key": (248, b"user", b"k", b"v", 1, -2),
    "unshare(CLONE_NEWUSER)": (272, CLONE_NEWUSER),
    "mount": (165, b"none", b"/tmp", b"tmpfs", 0, 0),
}
out = {}
for name, (nr, *args) in calls.items():
    ctypes.set_errno(0)
    rc = libc.syscall(nr, *args)
    out[name] = "allowed" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
print(json.dumps(out))
"""
REFUSED = {
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "unshare(CLONE_NEWUSER)",
    "mount",
}


def probe(session) -> dict[str, str]:
    result = session.shell("python3 -", stdin=PROBE)
    assert result.ok and result.output["exit_code"] == 0, result
    print(result.output["stdout"])  # what each runtime answers, for the record
    return json.loads(result.output["stdout"])  # type: ignore[no-any-return]


def test_dangerous_syscalls_are_refused(client):
    with client.session() as session:
        found = probe(session)
        assert set(found) == REFUSED
        # The filter answers EPERM; gVisor's own kernel may refuse first
        # (ENOSYS for what it does not implement).
        allowed = {"EPERM", "ENOSYS"} if under_gvisor() else {"EPERM"}
        assert {name: code for name, code in found.items() if code not in allowed} == {}, found
        # Ordinary work is untouched: fork, threads, a namespace-free clone.
        ok = session.shell(
            "python3 -c 'import subprocess; print(subprocess.run([\"true\"]).returncode)'"
        )
        assert ok.output["stdout"].strip() == "0", ok
        mode = session.shell("grep '^Seccomp:' /proc/self/status")
        assert mode.output["stdout"].split() == ["Seccomp:", "2"], mode


# socket(family, type, protocol) for each family a sandbox's code might ask
# for; the libc call, so Python's own checks cannot answer first.
FAMILIES = r"""
import ctypes, errno, json
libc = ctypes.CDLL(None, use_errno=True)
probes = {
    "unix": (1, 1, 0), "inet": (2, 1, 0), "inet6": (10, 2, 0), "netlink-route": (16, 3, 0),
    "netlink-uevent": (16, 3, 15), "netlink-audit": (16, 3, 9), "netlink-diag": (16, 3, 4),
    "vsock": (40, 1, 0), "packet": (17, 3, 0), "bluetooth": (31, 3, 0), "alg": (38, 5, 0),
    "key": (15, 3, 2), "xdp": (44, 3, 0), "tipc": (30, 2, 0), "rds": (21, 5, 0),
    "can": (29, 3, 1), "smc": (43, 1, 0), "qipcrtr": (42, 2, 0), "mctp": (45, 2, 0),
}
out = {}
for name, args in probes.items():
    ctypes.set_errno(0)
    out[name] = "ok" if libc.socket(*args) >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
print(json.dumps(out))
"""
FAMILIES_USED = {"unix", "inet", "inet6", "netlink-route"}


def test_address_families_a_sandbox_has_no_use_for_are_refused(session):
    # vsock is not namespaced: on a VM host it reaches the hypervisor's side
    # whatever the network says; netlink beyond routes, packet, bluetooth,
    # the crypto API and the rest serve no command of a sandbox.
    result = session.shell("python3 -", stdin=FAMILIES)
    assert result.ok and result.output["exit_code"] == 0, result
    found = json.loads(result.output["stdout"])
    assert {name for name, answer in found.items() if answer == "ok"} == FAMILIES_USED, found
