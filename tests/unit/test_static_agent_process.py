"""The static agent's binary as a process of its own, spoken to over its pipes
as the daemon does: signals a process of the sandbox may send never stop
it, SIGUSR1 resyncs it, and what it cannot read or does not do yet is
answered, never left hanging (its commands and files: tests/docker; which
requests have a handler: main_test.go)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.agent import protocol
from runtime.agent.redact import encode_secrets
from runtime.sandbox.agent_dir import STATIC_AGENT

BINARY = Path(__file__).resolve().parents[2] / "runtime" / "agent" / STATIC_AGENT
ANSWER_S = 10.0


class AgentProcess:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [str(BINARY)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd="/"
        )
        self.decoder = protocol.Decoder()
        self.frames: list[protocol.Frame] = []
        self.next_id = 1
        self.epoch = 0

    def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def request(
        self, message: protocol.Message, epoch: int | None = None, body: bytes = b""
    ) -> protocol.Frame:
        rid, self.next_id = self.next_id, self.next_id + 1
        self.write(protocol.encode(message, rid, self.epoch if epoch is None else epoch, body))
        return self.frame(lambda f: f.request_id == rid)

    def frame(self, wanted: object) -> protocol.Frame:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + ANSWER_S
        while True:
            for frame in self.frames:
                if wanted(frame):  # type: ignore[operator]
                    self.frames.remove(frame)
                    return frame
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                pytest.fail("the static agent did not answer")
            data = os.read(fd, 1 << 16)
            if not data:
                pytest.fail("the static agent ended")
            self.frames += self.decoder.feed(data)

    def hello(self, epoch: int) -> protocol.HelloReply:
        self.epoch = epoch
        return self.request(protocol.Hello()).as_type(protocol.HelloReply)

    def ping(self) -> None:
        self.request(protocol.Ping()).as_type(protocol.Pong)


@pytest.fixture
def agent() -> Iterator[AgentProcess]:
    if not BINARY.is_file():
        pytest.fail(f"{BINARY} is missing: `make agent` builds it")
    process = AgentProcess()
    try:
        yield process
    finally:
        process.process.kill()
        process.process.communicate()


def test_hello_answers_the_protocol_version_and_the_pid(agent: AgentProcess) -> None:
    reply = agent.hello(epoch=41)
    assert reply.version == protocol.VERSION
    assert reply.pid == agent.process.pid
    assert (reply.running, reply.unacked) == ([], [])


def test_catchable_signals_never_stop_the_agent(agent: AgentProcess) -> None:
    agent.hello(epoch=3)
    for sig in (
        signal.SIGTERM,
        signal.SIGINT,
        signal.SIGHUP,
        signal.SIGQUIT,
        signal.SIGUSR2,
        signal.SIGTSTP,
        signal.SIGTTIN,
        signal.SIGALRM,
        signal.SIGPIPE,
    ):
        agent.process.send_signal(sig)
        agent.ping()
    assert agent.process.poll() is None


def test_sigusr1_drops_a_partial_frame_and_says_resync(agent: AgentProcess) -> None:
    agent.hello(epoch=5)
    # Half a frame from a daemon that died mid-write...
    agent.write(protocol.encode(protocol.Ping(), 99, 5)[:9])
    agent.process.send_signal(signal.SIGUSR1)
    resync = agent.frame(lambda f: f.op == protocol.Resync.OP)
    assert resync.as_type(protocol.Resync).pid == agent.process.pid
    # ...is forgotten: the next daemon's hello is read whole.
    assert agent.hello(epoch=6).version == protocol.VERSION


def test_bytes_that_are_no_frame_are_skipped(agent: AgentProcess) -> None:
    agent.hello(epoch=1)
    ping = protocol.encode(protocol.Ping(), 77, 1)
    too_large = protocol.PREFIX.pack(protocol.MAGIC, protocol.MAX_HEADER + 1, 0)
    not_json = protocol.PREFIX.pack(protocol.MAGIC, 7, 0) + b"{op:..."
    # Each in one write with the ping after it: the violation's bytes are
    # dropped, never the frame that follows.
    for junk in (b"garbage before any frame\n", too_large, not_json):
        agent.write(junk + ping)
        agent.frame(lambda f: f.request_id == 77).as_type(protocol.Pong)


def test_a_stale_epoch_is_dropped_and_unknown_ops_are_refused(agent: AgentProcess) -> None:
    agent.hello(epoch=8)
    agent.write(protocol.encode(protocol.Ping(), 50, 7))  # an earlier daemon's
    agent.ping()
    assert all(f.request_id != 50 for f in agent.frames)
    header = b'{"op":"nope","id":60,"epoch":8}'
    agent.write(protocol.PREFIX.pack(protocol.MAGIC, len(header), 0) + header)
    failure = agent.frame(lambda f: f.request_id == 60).as_type(protocol.Failure)
    assert (failure.code, failure.message) == (protocol.INTERNAL, 'unknown op "nope"')


def test_a_user_the_sandbox_lacks_is_refused_by_name(agent: AgentProcess) -> None:
    # As the Python agent refuses it, for a program and a path operation.
    agent.hello(epoch=2)
    for request in (
        protocol.Spawn(user="no-such-user-here"),
        protocol.Stat(path="/", user="no-such-user-here"),
    ):
        argv = b"true\0" if isinstance(request, protocol.Spawn) else b""
        unknown = agent.request(request, body=argv).as_type(protocol.Failure)
        assert (unknown.code, unknown.message) == (
            protocol.USER_NOT_ALLOWED,
            "user 'no-such-user-here': no such user in the sandbox's /etc/passwd",
        )
    empty = agent.request(protocol.Spawn()).as_type(protocol.Failure)
    assert (empty.code, empty.message) == (
        protocol.INVALID_REQUEST,
        "argv is empty: name a program to run",
    )


def test_secrets_of_a_bad_shape_are_refused_and_good_ones_taken(agent: AgentProcess) -> None:
    agent.hello(epoch=3)
    for body in (b"[]", b'{"1X": "v"}', b'{"A": ""}', b"{not json"):
        failure = agent.request(protocol.Secrets(), body=body).as_type(protocol.Failure)
        assert failure.code == protocol.INVALID_ARGUMENTS
        assert failure.message.startswith("secrets: ")
    taken = agent.request(protocol.Secrets(), body=encode_secrets({"A_KEY": "value-of-a-key"}))
    assert taken.op == protocol.Done.OP
