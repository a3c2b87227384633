"""`toolrt run`, `exec` and `sessions` as a user runs them: a child process, a real daemon."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator

import grpc
import pytest

from runtime.client import Client, ToolrtRpcError
from tests.helpers import containers_of, free_port, wait_for

pytestmark = pytest.mark.docker


def toolrt(*args: str) -> list[str]:
    return [sys.executable, "-m", "runtime", *args]


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRT_")}
    return subprocess.run(
        toolrt(*args), capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def spawn(*args: str, sigint_ignored: bool = False) -> Iterator[subprocess.Popen[str]]:
    """`toolrt ARGS` as a child with piped output; killed and reaped after.
    It dumps every thread's stack on SIGABRT (see `exits_within`). With
    `sigint_ignored` it starts as a script's background job does."""
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    with subprocess.Popen(
        toolrt(*args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=ignore_sigint if sigint_ignored else None,  # noqa: PLW1509 - one call, one thread
    ) as proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()


def exits_within(proc: subprocess.Popen[str], seconds: float) -> int:
    """The child's exit code; a child still running by then fails the test
    with the stacks of all its threads (where it hangs, not only that it does)."""
    try:
        return proc.wait(seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        _, stderr = proc.communicate(timeout=30)
        pytest.fail(f"still running after {seconds} s; its threads:\n{stderr}")


class Lines:
    """A child's stdout, line by line as it arrives."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.queue: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        stream = proc.stdout
        threading.Thread(
            target=lambda: [self.queue.put(line) for line in stream], daemon=True
        ).start()

    def next(self, timeout: float = 30) -> str:
        return self.queue.get(timeout=timeout)


def test_run_streams_output_live_and_exits_with_the_commands_code(daemon, client, docker_client):
    script = (
        "echo first; echo oops >&2; "
        "while [ ! -e /workspace/go ]; do sleep 0.1; done; echo second; exit 7"
    )
    with spawn("run", "--target", daemon.target, "--", script) as proc:
        lines = Lines(proc)
        # "first" arrives while the command still waits for the go file.
        assert lines.next() == "first\n"
        assert proc.poll() is None
        # Calls of the session wait for the running one: go through the engine.
        (session,) = client.list_sessions()
        container = docker_client.containers.get(f"toolrt-{session.id}")
        assert container.exec_run(["touch", "/workspace/go"], user="1000:1000").exit_code == 0
        assert lines.next() == "second\n"
        assert proc.wait(30) == 7
        assert proc.stderr is not None and "oops" in proc.stderr.read()
    # The throwaway session is gone.
    assert client.list_sessions() == []


def test_run_exit_codes_timeout_and_argument_quoting(daemon, client):
    done = run_cli("run", "--target", daemon.target, "--", "printf", "%s|", "a b", "$HOME")
    assert done.returncode == 0 and done.stdout == "a b|$HOME|"
    killed = run_cli("run", "--target", daemon.target, "--", "kill -9 $$")
    assert killed.returncode == 137
    timed_out = run_cli("run", "--target", daemon.target, "--timeout", "1", "--", "sleep 30")
    assert timed_out.returncode == 124 and "TIMEOUT" in timed_out.stderr
    envs = run_cli("run", "--target", daemon.target, "--env", "A=1", "-e", "B=2", "--", "echo $A$B")
    assert envs.returncode == 0 and envs.stdout == "12\n"
    assert client.list_sessions() == []


def test_run_against_no_daemon_is_125():
    done = run_cli("run", "--target", "127.0.0.1:1", "--", "true", timeout=120)
    assert done.returncode == 125 and "UNAVAILABLE" in done.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("sigint_ignored", [False, True])
def test_run_interrupted_removes_its_session(daemon, client, sig, sigint_ignored):
    """Also when it started with SIGINT ignored (a background job of a
    script): it was then deaf to INT and its session outlived it."""
    command = ("run", "--target", daemon.target, "--", "echo started; sleep 60")
    with spawn(*command, sigint_ignored=sigint_ignored) as proc:
        assert Lines(proc).next() == "started\n"
        proc.send_signal(sig)
        assert exits_within(proc, 60) == 130
    wait_for(lambda: client.list_sessions() == [])


def test_exec_runs_in_an_existing_session(daemon, client, session):
    target = ["--target", daemon.target]
    first = run_cli("exec", *target, session.id, "--", "echo kept > f; echo hi; exit 3")
    assert first.returncode == 3 and first.stdout == "hi\n"
    second = run_cli("exec", *target, "--cwd", "/workspace", session.id, "--", "cat", "f")
    assert second.returncode == 0 and second.stdout == "kept\n"
    missing = run_cli("exec", *target, "no-such-session", "--", "true")
    assert missing.returncode == 125 and "NOT_FOUND" in missing.stderr
    assert [s.id for s in client.list_sessions()] == [session.id]


def test_sessions_create_get_list_close(daemon, client):
    target = ["--target", daemon.target]
    created = run_cli(
        "sessions", "create", *target, "--ttl", "600", "--idle", "60",
        "--env", "A=1", "--label", "team=x", "--limit", "memory_bytes=256M",
        "--limit", "workspace_bytes=128M", "--limit", "cpus=0.5",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    session_id = created.stdout.strip()
    got = run_cli("sessions", "get", session_id, *target)
    info = json.loads(got.stdout)
    assert info["id"] == session_id and info["labels"] == {"team": "x"}
    assert info["ttl_seconds"] == 600 and info["idle_seconds"] == 60
    assert int(info["limits"]["memory_bytes"]) == 256 << 20 and info["limits"]["cpus"] == 0.5
    listed = run_cli("sessions", "list", *target)
    assert listed.stdout.startswith(f"{session_id}\tready\t")
    assert run_cli("exec", *target, session_id, "--", "echo $A").stdout == "1\n"
    closed = run_cli("sessions", "close", session_id, *target)
    assert closed.returncode == 0 and closed.stdout == "closed\n"
    assert client.list_sessions() == []
    bad = run_cli("sessions", "create", *target, "--limit", "bogus=1")
    assert bad.returncode == 2 and "unknown limit 'bogus'" in bad.stderr


def test_streamed_calls_report_the_exit_code_every_time(client, session):
    # The agent once answered 137 when it saw its subreaper exit before
    # reading the status pipe; `run` and `exec` exit with this code.
    codes = set()
    for _ in range(40):
        *_, result = client.stream(session.id, "shell", {"command": "echo x; exit 3"})
        codes.add(result.output["exit_code"])
    assert codes == {3}


def test_serve_takes_settings_from_file_env_and_flags(docker_client, tmp_path):
    instance = f"test-{uuid.uuid4().hex[:10]}"
    config = tmp_path / "toolrt.toml"
    config.write_text('max_sessions = 9\n[extra_labels]\n"toolrt.test" = "1"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRT_")}
    env["TOOLRT_DEFAULT_TTL_SECONDS"] = "2"
    env["TOOLRT_MAX_SESSIONS"] = "5"
    env["TOOLRT_STATE_DIR"] = str(tmp_path / "state")
    target = f"127.0.0.1:{free_port()}"
    args = ["serve", "--config", str(config), "--listen", target, "--instance", instance]
    args += ["--max-sessions", "1", "--reaper-interval", "0.2"]
    with subprocess.Popen(toolrt(*args), env=env, stderr=subprocess.DEVNULL) as proc:
        try:
            with Client(target) as client:
                wait_for(lambda: _answers(client))
                first = client.create_session()
                assert first.expires_at == pytest.approx(first.created_at + 2)  # env
                with pytest.raises(ToolrtRpcError) as err:  # the flag beats env and file
                    client.create_session()
                assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
                wait_for(lambda: client.list_sessions() == [])  # reaped after 2 s
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    assert containers_of(docker_client, instance) == []


def _answers(client: Client) -> bool:
    try:
        client.list_sessions()
    except ToolrtRpcError:
        return False
    return True
