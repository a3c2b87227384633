"""The static agent's channel (runtime/sandbox/docker/channel.py): the
protocol travels on a unix socket the agent dials, not on the container's
stdio, so root in the sandbox (granted capabilities, under runc or gVisor)
finds no descriptor of PID 1 that carries it, and cannot take the socket
over when a restarted daemon listens on it again."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from runtime.client import Client
from runtime.client.sdk import SessionHandle
from runtime.sandbox.docker import channel
from tests.docker import test_lifecycle as lifecycle
from tests.docker import test_restarts as restarts

pytestmark = [pytest.mark.docker, pytest.mark.static_agent]

GRANT = {"default": {"users": ["root"], "root_capabilities": True}}
MARKER = "channel-marker-5b1f"

# Root opens every descriptor of PID 1 it can (then creates /tmp/listening)
# and reads them all until /tmp/stop exists
# (or a minute passed), and writes to /tmp/report what it opened and whether
# the daemon's frames (MAGIC, or the marker only the test's requests carry)
# went by. Not to its stdout: under gVisor one of the descriptors it opens is
# the agent's end of its own output pipe (what it reads there is its own
# session's output, never a frame).
EAVESDROP = r"""
import os, sys, time
opened = []
for fd in sorted(os.listdir("/proc/1/fd"), key=int):
    try:
        opened.append((fd, os.open("/proc/1/fd/" + fd, os.O_RDONLY | os.O_NONBLOCK)))
    except OSError:
        pass
open("/tmp/listening", "w").close()
stolen = b""
deadline = time.monotonic() + 60
while not os.path.exists("/tmp/stop") and time.monotonic() < deadline:
    for _, f in opened:
        try:
            stolen += os.read(f, 1 << 16)
        except OSError:
            pass
    time.sleep(0.01)
seen = [word for word in (b"TRT1", MARKER) if word in stolen]
with open("/tmp/report", "w") as report:
    print(" ".join(fd for fd, _ in opened) or "none", file=report)
    print("seen", *[w.decode() for w in seen] or ["nothing"], len(stolen), file=report)
""".replace("MARKER", repr(MARKER.encode()))

# Root dials agent.sock again and again (a re-adoption makes it listen for a
# moment): each connection presents a wrong token and a forged Resync, or
# nothing at all, and is held open.
DIALER = r"""
import os, socket, sys, time
sys.path.insert(0, "/opt/toolrt")
from agent import protocol as p
forged = p.encode(p.Channel(token="0" * 64), 0, 0) + p.encode(p.Resync(pid=1), 0, 0)
held, deadline = [], time.monotonic() + 120
while not os.path.exists("/tmp/stop") and time.monotonic() < deadline:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(p.AGENT_SOCKET)
    except OSError:
        s.close()
        time.sleep(0.001)
        continue
    if len(held) % 2 == 0:
        s.sendall(forged)
    held.append(s)
    time.sleep(0.001)
    with open("/tmp/dialed", "w") as out:
        out.write(str(len(held)))
"""


def test_root_finds_no_descriptor_of_the_agent_carrying_the_protocol(make_daemon: Any) -> None:
    daemon = make_daemon(agent="static", tenants=GRANT)
    with Client(daemon.target) as client, client.session(users=["root"]) as session:
        found: list[Any] = []

        def listen() -> None:
            try:
                found.append(session.exec(["python3", "-c", EAVESDROP], user="root", timeout_s=90))
            except Exception as exc:  # shown by the assertion below
                found.append(exc)

        eavesdrop = threading.Thread(target=listen)
        eavesdrop.start()
        # Root's pick of descriptors made first: under gVisor a command
        # running meanwhile would have its output pipe among them, and root
        # may read what it prints (its own session's output, never a frame).
        deadline = time.monotonic() + 60
        while session.exec(["test", "-e", "/tmp/listening"]).exit_code != 0:
            assert time.monotonic() < deadline, found
            time.sleep(0.05)
        # Frames go both ways while root listens: requests carrying the
        # marker in their argv (no process prints it, no pipe carries it).
        for n in range(5):
            done = session.exec(["sh", "-c", "echo $#", MARKER, str(n)], timeout_s=20)
            assert done.stdout == b"1\n", done
        session.exec(["touch", "/tmp/stop"], timeout_s=20)
        eavesdrop.join(120)
        [result] = found
        assert not isinstance(result, Exception), result
        assert result.exit_code == 0, result
        opened, seen = session.exec(["cat", "/tmp/report"]).stdout.decode().splitlines()
        assert seen.startswith("seen nothing "), (opened, seen)
        assert session.shell("echo after").output["stdout"] == "after\n"


def test_root_dialing_during_a_readoption_does_not_take_the_agent(
    instance: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The next daemon listens for a few milliseconds only; it holds its
    # SIGUSR1 to the agent until root's dialer has connected, so that root's
    # connections surely are among those it checks.
    root_dialed = threading.Event()
    connected, listening = channel.Listener._connected, channel.listening

    def counted(self: Any, reader: Any, writer: Any) -> None:
        root_dialed.set()  # before the SIGUSR1 only root can dial
        connected(self, reader, writer)

    @contextlib.asynccontextmanager
    async def after_root(path: str, token: str = "") -> AsyncIterator[Any]:
        async with listening(path, token) as listener:
            await asyncio.get_running_loop().run_in_executor(None, root_dialed.wait, 30)
            yield listener

    first = instance(agent="static", tenants=GRANT)
    with Client(first.target) as client:
        session = client.session(users=["root"])
        sid = session.id
        assert session.shell("cd /tmp && export KEPT=1", persist_env=True).ok
        session.exec(["sh", "-c", 'echo "$0" > /tmp/dialer.py', DIALER], user="root")
        started = session.exec(
            ["sh", "-c", "setsid python3 /tmp/dialer.py >/tmp/dialer.log 2>&1 & echo started"],
            user="root",
        )
        assert started.stdout == b"started\n", started
    restarts.crash(first)
    monkeypatch.setattr(channel.Listener, "_connected", counted)
    monkeypatch.setattr(channel, "listening", after_root)
    second = instance(agent="static", tenants=GRANT)
    with Client(second.target) as client:
        again = SessionHandle(client, client.get_session(sid))
        done = again.shell("pwd; echo $KEPT")
        assert done.output["stdout"] == "/tmp\n1\n", done
        dialed = again.exec(["cat", "/tmp/dialed"], user="root")
        again.exec(["touch", "/tmp/stop"])
        # The attack happened: root reached the socket while it listened.
        assert int(dialed.stdout or b"0") >= 1, (dialed, again.exec(["cat", "/tmp/dialer.log"]))
        assert again.exec(["echo", "still"]).stdout == b"still\n"
        assert client.close_session(sid) == "closed"


RESTART_CHECKS = [
    restarts.test_a_crashed_daemons_session_is_readopted_whole,
    restarts.test_sigterm_keep_answers_unavailable_and_the_retry_gets_the_result,
    restarts.test_a_container_gone_while_down_is_closed_as_lost,
]


@pytest.mark.parametrize("check", RESTART_CHECKS, ids=[c.__name__[5:] for c in RESTART_CHECKS])
def test_the_restart_checks_pass_on_the_channel(
    check: Any, instance: Any, docker_client: Any
) -> None:
    def static(**overrides: Any) -> Any:
        return instance(**{"agent": "static", **overrides})

    check(static, docker_client)


def test_a_container_that_dies_is_seen_as_lost(make_daemon: Any, docker_client: Any) -> None:
    # Its end is the end of the socket, as it was of the attach stream.
    with Client(make_daemon(agent="static").target) as client:
        lifecycle.test_container_killed_mid_call_is_sandbox_lost(client, docker_client)


def test_the_token_lives_outside_the_sandbox_and_goes_with_it(
    make_daemon: Any, docker_client: Any, tmp_path: Path
) -> None:
    daemon = make_daemon(agent="static", state_dir=str(tmp_path))
    with Client(daemon.target) as client:
        session = client.session()
        kept = tmp_path / "channels" / session.id
        assert kept.stat().st_mode & 0o777 == 0o600
        token = kept.read_text()
        assert len(token) == 64
        [container] = docker_client.containers.list(
            filters={"label": f"toolrt.session={session.id}"}
        )
        # Not in the agent's argv or environment, which root may read.
        assert token not in str(container.attrs["Config"])
        session.close()
        assert not kept.exists()
