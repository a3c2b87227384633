"""The `python` tool against a real sandbox: an interpreter that remembers,
shows tables and figures, reports exceptions, and survives runaways."""

from __future__ import annotations

import base64
import struct

import pytest

from runtime.client.sdk import Client
from tests.helpers import user_processes

pytestmark = pytest.mark.docker

FIGURE = """\
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig = plt.figure(figsize=(4, 3), dpi=100)
plt.plot([1, 2, 3], [3, 1, 2])
plt.show()
"""


def png_size(data: str) -> tuple[int, int]:
    raw = base64.b64decode(data)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", raw[16:24])


def test_state_tables_figures_and_errors(session):
    first = session.call("python", {"code": "x = 41\nprint('hello')\nx + 1"})
    assert first.ok, first
    assert first.output["stdout"] == "hello\n"
    assert first.output["result"] == "42"
    assert session.call("python", {"code": "x * 2"}).output["result"] == "82"

    table = session.call(
        "python", {"code": "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})"}
    )
    assert table.ok, table
    kinds = {o["type"]: o["data"] for o in table.output["outputs"]}
    assert "<table" in kinds["text/html"]
    assert kinds["text/plain"].split() == ["a", "b", "0", "1", "3", "1", "2", "4"]

    drawn = session.call("python", {"code": FIGURE})
    assert drawn.ok, drawn
    [image] = drawn.output["outputs"]
    assert image["type"] == "image/png"
    assert png_size(image["data"]) == (400, 300)
    # Returned once, then closed.
    assert session.call("python", {"code": "plt.get_fignums()"}).output["result"] == "[]"

    failed = session.call("python", {"code": "def f():\n    return 1 / 0\nf()"})
    assert failed.error_code == "EXECUTION_ERROR"
    error = failed.output["error"]
    assert error["name"] == "ZeroDivisionError"
    assert error["message"] == "division by zero"
    assert "return 1 / 0" in error["traceback"] and "line 2, in f" in error["traceback"]
    assert "interpreter.py" not in error["traceback"]
    # The state from before the exception stays.
    assert session.call("python", {"code": "x"}).output["result"] == "41"


def test_input_eof_exit_reset_and_children(session, docker_client):
    eof = session.call("python", {"code": "input()"})
    assert eof.output["error"]["name"] == "EOFError"
    # A child started by a cell is stopped when the call ends.
    started = session.call(
        "python",
        {"code": "import subprocess\np = subprocess.Popen(['sleep', '600'])\np.pid"},
    )
    assert started.ok, started
    assert not [p for p in user_processes(docker_client, session.id) if "sleep 600" in p]
    session.call("python", {"code": "kept = 1"})
    exited = session.call("python", {"code": "import sys\nsys.exit(3)"})
    assert exited.ok and "sys.exit(3)" in exited.output["note"]
    after = session.call("python", {"code": "'kept' in globals()"})
    assert after.output["result"] == "False"
    assert after.output["restarted"] is True and "previous one ended" in after.output["note"]
    session.call("python", {"code": "y = 1"})
    fresh = session.call("python", {"code": "'y' in globals()", "reset": True})
    assert fresh.output["result"] == "False"
    assert "restarted" not in fresh.output


def test_a_runaway_cell_is_interrupted_and_the_state_kept(session):
    session.call("python", {"code": "before = 'still here'"})
    spun = session.call("python", {"code": "while True:\n    pass", "timeout_s": 1})
    assert spun.error_code == "TIMEOUT"
    assert spun.output["error"]["name"] == "KeyboardInterrupt"
    assert "restarted" not in spun.output
    assert session.call("python", {"code": "before"}).output["result"] == "'still here'"


def test_a_cell_that_ignores_the_interrupt_restarts_the_interpreter(session):
    session.call("python", {"code": "before = 1"})
    stubborn = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(600)"
    stuck = session.call("python", {"code": stubborn, "timeout_s": 1})
    assert stuck.error_code == "TIMEOUT"
    assert stuck.output.get("restarted") is True, stuck
    assert session.call("python", {"code": "'before' in globals()"}).output["result"] == "False"


def test_past_the_memory_ceiling_the_interpreter_restarts_and_the_session_lives(client):
    with client.session(limits={"memory_bytes": 512 << 20}) as session:
        session.call("python", {"code": "small = 1"})
        grown = session.call("python", {"code": "hog = b'x' * (600 << 20)"})
        assert grown.error_code == "LIMIT_EXCEEDED", grown
        assert grown.output["restarted"] is True
        assert "memory ceiling" in grown.error_message
        assert session.shell("echo alive").output["stdout"] == "alive\n"
        again = session.call("python", {"code": "'small' in globals()"})
        assert again.output["result"] == "False"


def test_execute_stream_sends_output_as_it_comes(session):
    code = "import time\nprint('first', flush=True)\ntime.sleep(0.5)\nprint('second')\n7"
    events = list(session.stream("python", {"code": code}))
    *chunks, result = events
    assert result.ok and result.output["result"] == "7"
    assert result.output["stdout"] == "first\nsecond\n"
    assert b"".join(data for name, data in chunks if name == "stdout") == b"first\nsecond\n"
    # Sent as it came: the first line on its own, not with the answer.
    assert chunks[0][1].startswith(b"first") and b"second" not in chunks[0][1]


def test_two_sessions_have_their_own_interpreters(client):
    with client.session() as one, client.session() as two:
        one.call("python", {"code": "mine = 'one'"})
        two.call("python", {"code": "mine = 'two'"})
        assert one.call("python", {"code": "mine"}).output["result"] == "'one'"
        assert two.call("python", {"code": "mine"}).output["result"] == "'two'"


def test_secrets_are_redacted_from_every_text_output(make_daemon, tmp_path):
    secret = "s3cr3t-value-123"
    path = tmp_path / "secrets.env"
    path.write_text(f"API_KEY={secret}\n")
    path.chmod(0o600)
    daemon = make_daemon(secrets_file=str(path), tenants={"default": {"secrets": ["API_KEY"]}})
    code = "import os, sys\nk = os.environ['API_KEY']\nprint(k)\nprint(k, file=sys.stderr)\nk"
    with Client(daemon.target) as client, client.session(secrets=["API_KEY"]) as session:
        shown = session.call("python", {"code": code})
        failed = session.call("python", {"code": "raise ValueError(k)"})
    assert secret not in str(shown.output) and secret not in str(failed)
    assert "[REDACTED:API_KEY]" in shown.output["stdout"]
    assert "[REDACTED:API_KEY]" in failed.output["error"]["message"]


def test_restore_stops_the_interpreter(session):
    session.call("python", {"code": "x = 1\nopen('data.txt', 'w').write('kept')"})
    session.restore(session.snapshot().id)
    after = session.call("python", {"code": "print(open('data.txt').read())\n'x' in globals()"})
    assert after.output["stdout"] == "kept\n"
    assert after.output["result"] == "False"
