"""The launcher's syscall filter (runtime/agent/seccomp.py), installed in a
fork of the test process: what it refuses, what it lets through."""

from __future__ import annotations

import ctypes
import errno
import os
import platform

import pytest

from runtime.agent import procs, seccomp


def test_program_is_whole_instructions_for_known_arches():
    for machine in seccomp.ARCHES:
        program = seccomp.program(machine)
        assert len(program) % seccomp.INSTRUCTION.size == 0
        assert 0 < len(program) // seccomp.INSTRUCTION.size < 256
    with pytest.raises(ValueError, match="no syscall filter for architecture 'mips'"):
        seccomp.program("mips")


def test_a_failed_install_is_a_report_the_agent_words():
    stage, err = procs.decode_report(procs.encode_report(procs.STAGE_FILTER, errno.EINVAL))
    code, message = procs.failure_of_spawn(stage, err, "/workspace")
    assert code == "INTERNAL"
    assert message.startswith("installing the syscall filter")


@pytest.mark.skipif(platform.machine() not in seccomp.ARCHES, reason="no filter for this arch")
def test_filter_refuses_the_listed_syscalls_and_nothing_else():
    numbers = seccomp.ARCHES[platform.machine()][1]
    probes = {name: (numbers[name], 0) for name in seccomp.REFUSED}
    probes["unshare(CLONE_NEWUSER)"] = (numbers["unshare"], seccomp.CLONE_NEWUSER)
    probes["clone3"] = (numbers["clone3"], 0)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            seccomp.install(seccomp.program())
            libc = ctypes.CDLL(None, use_errno=True)
            lines = []
            for name, (nr, arg) in probes.items():
                ctypes.set_errno(0)
                rc = libc.syscall(nr, arg, 0, 0, 0, 0)
                lines.append(f"{name} {rc} {ctypes.get_errno()}")
            lines.append(f"unshare(0) {libc.syscall(numbers['unshare'], 0)} 0")
            lines.append(f"getpid {int(libc.syscall(39 if numbers['clone'] == 56 else 172) > 0)} 0")
            os.write(write, "\n".join(lines).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        found = {name: (int(rc), int(err)) for name, rc, err in (ln.split() for ln in f)}
    os.waitpid(pid, 0)
    for name in seccomp.REFUSED + ("unshare(CLONE_NEWUSER)",):
        assert found[name] == (-1, errno.EPERM), name
    assert found["clone3"] == (-1, errno.ENOSYS)
    assert found["unshare(0)"][0] == 0
    assert found["getpid"] == (1, 0)
