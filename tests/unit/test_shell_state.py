"""The shell wrapper and session shell state: pure logic, checked with the host's bash."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from runtime.agent.background import Ring, parse_state, partial_utf8_tail, wrap_command
from runtime.agent.protocol import ShellReport
from runtime.policy.allowlist import PathPolicy
from runtime.tools.shell_state import ShellState


def run_wrapped(tmp_path: Path, command: str, **options: bool) -> tuple[int, str, str, dict]:
    state_file = tmp_path / "state"
    wrapped = wrap_command(
        command, str(state_file), options.get("pipefail", False), options.get("env", False)
    )
    proc = subprocess.run(
        ["bash", "-c", wrapped],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "KEEP": "1"},
        check=False,
    )
    data = state_file.read_bytes() if state_file.exists() else b""
    return proc.returncode, proc.stdout, proc.stderr, parse_state(data)


@pytest.mark.parametrize(
    ("command", "code"),
    [("exit 7", 7), ("false", 1), ("true", 0), ("(exit 4)", 4), ("kill -TERM $$", -15)],
)
def test_wrapper_keeps_the_exit_code(tmp_path, command, code):
    assert run_wrapped(tmp_path, command)[0] == code


def test_wrapper_leaves_output_alone_and_reports_the_final_directory(tmp_path):
    (tmp_path / "sub dir").mkdir()
    code, out, err, state = run_wrapped(
        tmp_path, "set -o noclobber; umask 077; cd 'sub dir'; echo out; echo err >&2; exit 3"
    )
    assert (code, out, err) == (3, "out\n", "err\n")
    assert state == ShellReport(cwd=str((tmp_path / "sub dir").resolve()))


def test_wrapper_keeps_line_numbers_of_errors(tmp_path):
    code, _, err, _ = run_wrapped(tmp_path, "echo ok\nfi")
    assert code == 2
    assert "line 2" in err


def test_wrapper_reports_exports_and_pipefail(tmp_path):
    _, _, _, state = run_wrapped(tmp_path, "export NEW='a b'; unset KEEP", env=True)
    assert state.env is not None
    assert state.env["NEW"] == "a b"
    assert "KEEP" not in state.env
    assert "PWD" not in state.env and "SHLVL" not in state.env
    assert run_wrapped(tmp_path, "false | true")[0] == 0
    assert run_wrapped(tmp_path, "false | true", pipefail=True)[0] == 1


def test_without_a_fifo_only_the_options_are_added(tmp_path):
    assert wrap_command("echo hi", "", False, False) == "echo hi"
    assert wrap_command("echo hi", "", True, False) == "set -o pipefail; echo hi"


def test_parse_state_of_nothing_is_empty():
    assert parse_state(b"") == ShellReport()
    assert parse_state(b"\x00") == ShellReport()  # pwd failed: the directory was removed


def test_ring_keeps_the_newest_bytes_and_counts_what_fell_off():
    ring = Ring(10)
    ring.add(b"0123456789")
    assert ring.read() == (b"0123456789", 0)
    ring.add(b"abcdefghijklmnopqrstuvwxyz" * 4000)
    data, dropped = ring.read()
    assert data == b"qrstuvwxyz"
    assert dropped == 26 * 4000 - 10
    assert ring.read() == (b"", 0)
    assert len(ring.buf) <= 10 + 65536


def test_ring_reads_never_cut_a_utf8_character():
    euro = "€".encode()  # three bytes
    ring = Ring(100)
    ring.add(b"price " + euro[:2])
    assert ring.read(whole_chars=True) == (b"price ", 0)
    assert ring.unread == 2
    ring.add(euro[2:] + b"!")
    assert ring.read(whole_chars=True) == (euro + b"!", 0)
    assert [partial_utf8_tail(b"a"), partial_utf8_tail(euro), partial_utf8_tail(euro[:1])] == [
        0,
        0,
        1,
    ]
    assert partial_utf8_tail("😀".encode()[:3]) == 3


def test_directory_is_kept_only_inside_the_read_roots():
    policy = PathPolicy(read_roots=("/workspace", "/tmp"))
    for kept in ("/workspace", "/workspace/a/b", "/tmp/x"):
        state = ShellState()
        assert state.record(ShellReport(cwd=kept), {}, False, policy) is None
        assert state.cwd == kept
    for refused in ("/etc", "/workspace2", "/", "/workspace/../etc", "workspace"):
        state = ShellState()
        assert "outside the allowed directories" in (
            state.record(ShellReport(cwd=refused), {}, False, policy) or ""
        )
        assert state.cwd == "/workspace"


def test_state_records_directory_and_environment_changes():
    state = ShellState()
    sent = {"PATH": "/bin", "KEEP": "1", "CALL_ONLY": "x"}
    note = state.record(
        ShellReport(cwd="/workspace/src", env={"PATH": "/bin", "CALL_ONLY": "x", "NEW": "2"}),
        sent,
        persist_env=True,
    )
    assert note is None
    assert state.cwd == "/workspace/src"
    assert state.env_set == {"NEW": "2"}
    assert state.env_unset == {"KEEP"}
    assert state.environment({"PATH": "/bin", "KEEP": "1"}) == {"PATH": "/bin", "NEW": "2"}
    note = state.record(ShellReport(cwd="/etc", env={}), sent, persist_env=False)
    assert note is not None and "/etc" in note
    assert state.cwd == "/workspace/src"
    assert state.env_set == {"NEW": "2"}
