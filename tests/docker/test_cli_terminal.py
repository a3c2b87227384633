"""`toolrt run -it` and `toolrt exec -it` driven as a person drives them:
inside tmux (send-keys, capture-pane), against a real daemon."""

from __future__ import annotations

import hashlib
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.helpers import under_gvisor, user_processes, wait_for

# gVisor's terminal (runsc 2022-12) ends input at once for readline's
# settings, so bash there runs without line editing (docs/programs.md).
BASH = ["bash", "--noediting"] if under_gvisor() else ["bash"]

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt: tmux)"),
]


class Tmux:
    """One tmux server of this test's own (its socket name), one pane."""

    def __init__(self, command: str, rows: int = 30, cols: int = 100) -> None:
        self.socket = f"toolrt-test-{uuid.uuid4().hex[:8]}"
        self.tmux("new-session", "-d", "-x", str(cols), "-y", str(rows), "-s", "t", command)

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True
        )
        return done.stdout

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "t", *keys)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t")

    def shows(self, text: str, within_s: float = 60) -> str:
        """The screen once it shows `text`; fails with the screen if it never does."""
        deadline = time.monotonic() + within_s
        while text not in (screen := self.screen()):
            assert time.monotonic() < deadline, f"{text!r} never shown:\n{screen}"
            time.sleep(0.1)
        return screen

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)
        # tmux leaves its socket file behind once killed.
        where = os.environ.get("TMUX_TMPDIR", "/tmp")
        pathlib.Path(where, f"tmux-{os.getuid()}", self.socket).unlink(missing_ok=True)


@pytest.fixture
def pane(daemon) -> Iterator[callable]:
    panes: list[Tmux] = []

    def start(*args: str) -> Tmux:
        toolrt = shlex.join([sys.executable, "-m", "runtime", *args])
        # The pane stays open after the command, to read its exit code.
        keep = f"cd {shlex.quote(os.getcwd())}; {toolrt}; echo EXIT=$?; sleep 600"
        panes.append(Tmux(f"env -u TOOLRT_TARGET -u TOOLRT_TOKEN bash -c {shlex.quote(keep)}"))
        return panes[-1]

    yield start
    for p in panes:
        p.close()


def test_run_it_bash_is_a_terminal_of_this_size_resized_with_its_exit_code(daemon, pane):
    term = pane("run", "-it", "--target", daemon.target, "--", *BASH)
    term.shows("@sandbox:")
    term.keys("echo hi-$((6*7))", "Enter")
    term.shows("hi-42")
    term.keys("stty size", "Enter")
    term.shows("30 100")
    term.tmux("resize-window", "-t", "t", "-x", "120", "-y", "40")
    term.keys("stty size", "Enter")
    term.shows("40 120")
    term.keys("exit 3", "Enter")
    term.shows("EXIT=3")


@pytest.mark.runc_only("gVisor's terminal sends no signal for a typed ^C (docs/programs.md)")
def test_ctrl_c_in_run_it_interrupts_the_program_in_the_sandbox(
    daemon, client, docker_client, pane
):
    term = pane("run", "-it", "--target", daemon.target, "--", *BASH)
    term.shows("@sandbox:")
    term.keys("sleep 100", "Enter")
    (session,) = client.list_sessions()
    wait_for(lambda: any("sleep 100" in p for p in user_processes(docker_client, session.id)))
    term.keys("C-c")
    term.keys("echo after-$?", "Enter")
    term.shows("after-130")
    term.keys("exit", "Enter")
    term.shows("EXIT=0")


def test_exec_it_runs_in_an_existing_session(daemon, client, pane):
    with client.session() as session:
        session.write_file_bytes("/workspace/mark", b"here\n")
        term = pane("exec", "-it", "--target", daemon.target, session.id, "--", *BASH, "-i")
        term.shows("@sandbox:")
        term.keys("cat mark; tty", "Enter")
        screen = term.shows("/dev/pts/")
        assert "here" in screen
        term.keys("exit 5", "Enter")
        term.shows("EXIT=5")


def test_t_without_a_terminal_is_refused_and_i_alone_streams_stdin(daemon, client):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRT_")}
    base = [sys.executable, "-m", "runtime"]
    with client.session() as session:
        refused = subprocess.run(
            [*base, "exec", "-t", "--target", daemon.target, session.id, "--", "cat"],
            input=b"x",
            capture_output=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert refused.returncode == 125
        assert b"-t needs a terminal on stdin" in refused.stderr
        piped = subprocess.run(
            [*base, "exec", "-i", "--target", daemon.target, session.id, "--", "sha256sum"],
            input=b"\x00\xff" * 1000,
            capture_output=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert piped.returncode == 0, piped.stderr
        assert piped.stdout.split()[0].decode() == hashlib.sha256(b"\x00\xff" * 1000).hexdigest()
