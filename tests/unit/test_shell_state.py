"""The shell wrapper and session shell state: pure logic, checked with the host's bash."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runtime.agent.background import Ring, partial_utf8_tail
from runtime.agent.procs import STATE_FD
from runtime.agent.protocol import ShellReport
from runtime.agent.state import Malformed, StateChannel, parse_report, wrap_command
from runtime.tools.shell_state import ShellState


def run_wrapped(tmp_path: Path, command: str, **options: bool) -> tuple[int, str, str, Any]:
    """Run `command` wrapped as the agent would, its state channel at STATE_FD."""
    with_env = options.get("env", False)
    wrapped = wrap_command(command, True, options.get("pipefail", False), with_env)
    channel = StateChannel()
    os.dup2(channel.peer, STATE_FD)
    os.close(channel.peer)
    try:
        proc = subprocess.Popen(
            ["bash", "-c", wrapped],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={"PATH": "/usr/bin:/bin", "KEEP": "1"},
            pass_fds=(STATE_FD,),
        )
    finally:
        os.close(STATE_FD)
    channel.shell_pid = proc.pid
    out, err = proc.communicate(timeout=30)
    channel.read(4096)
    channel.close()
    report, notes = channel.outcome(with_env)
    return proc.returncode, out, err, (report, notes)


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
    assert state == (ShellReport(cwd=str((tmp_path / "sub dir").resolve())), [])


def test_wrapper_keeps_line_numbers_of_errors(tmp_path):
    code, _, err, _ = run_wrapped(tmp_path, "echo ok\nfi")
    assert code == 2
    assert "line 2" in err


def test_wrapper_reports_exports_and_pipefail(tmp_path):
    _, _, _, (state, notes) = run_wrapped(
        tmp_path, "export NEW='a b'$'\\n''c'; unset KEEP; set -eu -o posix; IFS=,", env=True
    )
    assert notes == [] and state.env is not None
    assert state.env["NEW"] == "a b\nc"
    assert "KEEP" not in state.env
    assert "PWD" not in state.env and "SHLVL" not in state.env
    assert run_wrapped(tmp_path, "false | true")[0] == 0
    assert run_wrapped(tmp_path, "false | true", pipefail=True)[0] == 1


def test_without_a_report_only_the_options_are_added(tmp_path):
    assert wrap_command("echo hi", False, False, False) == "echo hi"
    assert wrap_command("echo hi", False, True, False) == "set -o pipefail; echo hi"


def test_reports_from_other_processes_are_ignored_with_a_note(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "fake").mkdir()
    # A child replays the shell's own trap from elsewhere; the shell's report stands.
    _, _, _, (state, notes) = run_wrapped(
        tmp_path,
        'cd real; bash -c "cd ../fake; $(trap -p EXIT)"; python3 -c "import os; '
        f"os.write({STATE_FD}, b'junk')\"",
    )
    assert state == ShellReport(cwd=str((tmp_path / "real").resolve()))
    [note] = notes
    assert note.startswith("ignored ") and "other processes" in note


def test_a_report_the_shell_garbled_is_refused_whole(tmp_path):
    (tmp_path / "sub").mkdir()
    _, _, _, (state, notes) = run_wrapped(tmp_path, f"cd sub; printf junk >&{STATE_FD}")
    assert state is None
    assert "malformed" in notes[0]


def test_a_removed_directory_reports_no_directory(tmp_path):
    (tmp_path / "gone").mkdir()
    _, _, _, (state, _) = run_wrapped(tmp_path, "cd gone; rmdir ../gone")
    assert state == ShellReport(cwd="")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"toolrt-state-1\x00/w\n\x00",
        b"toolrt-state-1\x00w\n\x00END\x00",
        b"toolrt-state-1\x00/w\n\x00X=1\x00END\x00",
        b"junk\x00/w\n\x00END\x00",
        b"toolrt-state-1\x00/w\n\x00END\x00more",
    ],
)
def test_parse_refuses_what_the_trap_does_not_write(data):
    with pytest.raises(Malformed):
        parse_report(data, with_env=False)


def test_parse_with_env():
    ok = b"toolrt-state-1\x00/w\n\x00ENV\x00A=1\x00PWD=/w\x00ENV-END\x00END\x00"
    assert parse_report(ok, with_env=True) == (ShellReport(cwd="/w", env={"A": "1"}), "")
    no_env = b"toolrt-state-1\x00/w\n\x00ENV\x00END\x00"
    report, note = parse_report(no_env, with_env=True)
    assert report == ShellReport(cwd="/w") and "exports" in note
    with pytest.raises(Malformed):
        parse_report(b"toolrt-state-1\x00/w\n\x00ENV\x00=x\x00ENV-END\x00END\x00", True)


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


def test_directory_is_kept_wherever_the_command_ended():
    # The allowlist governs the file tools; a command may run anywhere the
    # sandbox user may enter (it could `cd` there itself).
    for kept in ("/workspace", "/workspace/a/b", "/tmp/x", "/etc", "/"):
        state = ShellState()
        assert state.record(ShellReport(cwd=kept), {}, False) is None
        assert state.cwd == kept
    state = ShellState()
    assert state.record(ShellReport(cwd="workspace"), {}, False) is None
    assert state.cwd == "/workspace"  # not an absolute path: not a report the agent makes


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
    assert note is None
    assert state.cwd == "/etc"
    assert state.env_set == {"NEW": "2"}


def test_exports_that_run_code_at_shell_start_are_not_kept():
    state = ShellState()
    env = {"BASH_ENV": "/w/x", "BASH_FUNC_f%%": "() { :\n}", "SHELLOPTS": "xtrace", "OK": "1"}
    note = state.record(ShellReport(cwd="/workspace", env=env), {}, persist_env=True)
    assert state.env_set == {"OK": "1"}
    assert note is not None
    assert "BASH_ENV, SHELLOPTS, function f" in note or "BASH_ENV" in note and "function f" in note


def test_the_shell_state_a_session_keeps_survives_its_record():
    from runtime.tools.shell_state import ToolState, dump_tool_state, load_tool_state

    kept = ToolState(ShellState("/workspace/src", {"A": "1"}, {"HOME"}), start_snapshot="snap_x")
    again = load_tool_state(json.loads(json.dumps(dump_tool_state(kept))))
    assert again == kept
    failed = ToolState(start_snapshot=None, start_why="shares.snapshot_space")
    assert load_tool_state(json.loads(json.dumps(dump_tool_state(failed)))) == failed
    assert load_tool_state({}) == ToolState()
    # A record stored before the start was kept: the start is unknown (so
    # workspace_diff says so), not an empty workspace.
    older = load_tool_state({"shell": {"cwd": "/workspace"}})
    assert older.start_snapshot is None and "did not keep its start" in older.start_why
