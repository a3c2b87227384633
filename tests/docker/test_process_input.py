"""A model driving interactive programs: `shell{background: true, tty: true}`
starts one in a terminal, `process_input` types into it across calls,
`process_output` reads what it printed."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.docker


def typed(session, handle: str, text: str) -> None:
    answer = session.call("process_input", {"process_id": handle, "text": text})
    assert answer.ok and answer.output["bytes_written"] == len(text.encode()), answer


def waited(session, handle: str, pattern: str) -> str:
    read = session.call(
        "process_output", {"process_id": handle, "wait_for": pattern, "timeout_s": 30}
    )
    assert read.ok and read.output["matched"], read
    return str(read.output["output"])


@pytest.mark.runc_only("gVisor's terminal ends input at once for readline and has no ^C")
def test_a_python_repl_is_driven_across_calls(session):
    started = session.shell("python3 -q", background=True, tty=True)
    assert started.ok and started.output["state"] == "running", started
    handle = started.output["process_id"]
    # Typed ahead of its prompt, as at a keyboard: the terminal keeps it.
    typed(session, handle, "x = 6 * 7\n")
    typed(session, handle, "print(x, __import__('os').isatty(0))\n")
    assert "42 True" in waited(session, handle, "42 True")
    typed(session, handle, "import time; time.sleep(100)\n")
    typed(session, handle, "\u0003")  # Ctrl-C: the REPL survives it
    assert "KeyboardInterrupt" in waited(session, handle, "KeyboardInterrupt")
    typed(session, handle, "exit(4)\n")
    ended = session.call("process_output", {"process_id": handle, "timeout_s": 30})
    assert ended.output["state"] == "exited" and ended.output["exit_code"] == 4, ended


def test_an_interactive_shell_keeps_its_state_across_calls(session):
    # Without line editing: gVisor's terminal ends readline's input at once.
    started = session.shell("bash --norc --noediting -i", background=True, tty=True)
    handle = started.output["process_id"]
    typed(session, handle, "cd /tmp; x=$((6*7))\n")
    typed(session, handle, 'echo "got-$x in $PWD"\n')
    assert "got-42 in /tmp" in waited(session, handle, "got-42 in /tmp")
    typed(session, handle, "exit 4\n")
    ended = session.call("process_output", {"process_id": handle, "timeout_s": 30})
    assert ended.output["state"] == "exited" and ended.output["exit_code"] == 4, ended


def test_a_prompt_is_answered(session):
    started = session.shell(
        'read -p "Proceed? [y/N] " answer; echo "got $answer"', background=True, tty=True
    )
    handle = started.output["process_id"]
    if "Proceed?" not in started.output["stdout"]:  # the first output comes with the start
        waited(session, handle, r"Proceed\? \[y/N\] ")
    typed(session, handle, "y\n")
    assert "got y" in waited(session, handle, "got y")


def test_typing_needs_a_terminal_and_tty_needs_background(session):
    plain = session.shell("sleep 100", background=True)
    refused = session.call("process_input", {"process_id": plain.output["process_id"], "text": "x"})
    assert refused.error_code == "INVALID_ARGUMENTS" and "no terminal" in refused.error_message
    unknown = session.call("process_input", {"process_id": "p99", "text": "x"})
    assert unknown.error_code == "NOT_FOUND"
    foreground = session.shell("true", tty=True)
    assert foreground.error_code == "INVALID_ARGUMENTS" and "background" in foreground.error_message
    done = session.shell("echo bye", background=True, tty=True)
    session.call("process_output", {"process_id": done.output["process_id"], "timeout_s": 30})
    ended = session.call("process_input", {"process_id": done.output["process_id"], "text": "x"})
    assert ended.error_code == "INVALID_ARGUMENTS" and "has ended" in ended.error_message
