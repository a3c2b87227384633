"""Exec under a terminal against the real engine: the program's controlling
terminal is a pseudo-terminal of the asked size, typed into through stdin,
resized, interrupted by ^C or a signal to its foreground, its tree killed
at the timeout as without one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import user_processes, wait_for

pytestmark = pytest.mark.docker


def printed_until(events: Iterator[tuple[str, Any]], needle: bytes) -> bytes:
    """What the terminal printed up to and including `needle` (all of it is
    "stdout"); fails if the program ends first."""
    seen = b""
    while needle not in seen:
        kind, value = next(events)
        assert kind == "stdout", (kind, value, seen)
        seen += value
    return seen


def ended(events: Iterator[tuple[str, Any]]) -> Any:
    """The exit event, past whatever else the terminal still prints."""
    for kind, value in events:
        if kind == "exit":
            return value
    pytest.fail("no exit event")


def test_a_tty_is_the_programs_controlling_terminal_with_term_set(session):
    result = session.exec(command="tty; echo $TERM", tty=True)
    assert result.exit_code == 0, result
    lines = result.stdout.decode().split("\r\n")
    assert lines[0].startswith("/dev/pts/"), result.stdout
    assert lines[1] == "xterm" and result.stderr == b""


# gVisor's terminal (runsc 2022-12, Debian's) has no /dev/tty, sends no
# signal for a typed ^C and does not tell who is in its foreground: there,
# a signal reaches the program's own process group (the one it started in).
GVISOR_TERMINAL = "gVisor's terminal has no /dev/tty and no ^C (DESIGN, platform notes)"


@pytest.mark.runc_only(GVISOR_TERMINAL)
def test_the_tty_is_the_programs_controlling_terminal_in_its_foreground(session):
    result = session.exec(["bash", "-c", "ps -o tpgid= -p $$; echo $$"], tty=True)
    assert len(set(result.stdout.split())) == 1, result.stdout
    assert session.exec(command="echo ok > /dev/tty", tty=True).stdout == b"ok\r\n"
    assert session.exec(command="echo no > /dev/tty").exit_code != 0


def test_stty_size_follows_the_size_and_each_resize(session):
    with session.exec_stream(
        command="stty size; read line; stty size", tty=True, size=(24, 80)
    ) as stream:
        events = stream.events()
        assert next(events)[0] == "started"
        assert b"24 80\r\n" in printed_until(events, b"24 80\r\n")
        stream.resize(40, 132)
        stream.write(b"go\r")
        assert b"40 132\r\n" in printed_until(events, b"40 132\r\n")
        assert ended(events).exit_code == 0


def test_a_prompt_is_answered_through_stdin(session):
    with session.exec_stream(
        ["bash", "-c", 'read -p "name? " n; echo "hello $n"; exit 7'], tty=True
    ) as stream:
        events = stream.events()
        assert next(events)[0] == "started"
        printed_until(events, b"name? ")
        stream.write(b"ada\r")
        assert b"hello ada\r\n" in printed_until(events, b"hello ada\r\n")
        assert ended(events).exit_code == 7


@pytest.mark.runc_only("gVisor's terminal takes a typed ^D for a character, not the end of input")
def test_closing_stdin_ends_a_line_readers_input_as_a_typed_ctrl_d(session):
    # A terminal has no end of input but the one typed: closing stdin types
    # ^D, and `cat` ends as at a keyboard (the timeout only bounds a failure).
    with session.exec_stream(["cat"], tty=True, timeout_s=60) as stream:
        events = stream.events()
        assert next(events)[0] == "started"
        stream.write(b"hi\r")
        printed_until(events, b"hi\r\n")
        stream.close_stdin()
        exit_ = ended(events)
        assert (exit_.exit_code, exit_.timed_out) == (0, False), exit_


@pytest.mark.parametrize(
    "interrupt",
    [
        pytest.param(
            lambda stream: stream.write(b"\x03"),
            marks=pytest.mark.runc_only(GVISOR_TERMINAL),
            id="ctrl-c",
        ),
        pytest.param(lambda stream: stream.signal("INT"), id="signal"),
    ],
)
def test_an_interrupt_stops_the_foreground_program(session, interrupt):
    with session.exec_stream(["sleep", "100"], tty=True) as stream:
        events = stream.events()
        assert next(events)[0] == "started"
        interrupt(stream)
        exit_ = ended(events)
        assert (exit_.exit_code, exit_.signal) == (130, "INT")


@pytest.mark.runc_only(GVISOR_TERMINAL)
def test_signal_int_reaches_an_interactive_shells_foreground_job(session, docker_client):
    # bash -i puts `sleep` in a process group of its own, the terminal's
    # foreground: INT must reach it there, and leave the shell running.
    with session.exec_stream(["bash", "--norc", "-i"], tty=True, env={"PS1": "$ "}) as stream:
        events = stream.events()
        assert next(events)[0] == "started"
        stream.write(b"sleep 100\r")
        printed_until(events, b"sleep 100")
        wait_for(lambda: any("sleep 100" in p for p in user_processes(docker_client, session.id)))
        stream.signal("INT")
        stream.write(b"echo status $?\r")
        printed_until(events, b"status 130")
        stream.write(b"exit 3\r")
        assert ended(events).exit_code == 3


def test_a_timeout_kills_a_tree_started_under_a_tty(session, docker_client):
    result = session.exec(
        command="sleep 1000 & sleep 1001 & echo started; wait", tty=True, timeout_s=1
    )
    assert result.timed_out and result.signal in ("TERM", "KILL"), result
    assert result.stdout == b"started\r\n"
    wait_for(lambda: not any("sleep 100" in p for p in user_processes(docker_client, session.id)))
