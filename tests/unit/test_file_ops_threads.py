"""A file operation is answered even when the sandbox cannot start a thread."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from runtime.agent import file_ops, protocol


class Agent:
    def __init__(self) -> None:
        self.file_ops: dict[int, Any] = {}
        self.flows: dict[int, Any] = {}
        self.sent: list[tuple[protocol.Message, int]] = []

    def send(self, message: protocol.Message, rid: int, body: bytes = b"") -> None:
        self.sent.append((message, rid))

    def fail(self, rid: int, code: str, message: str) -> None:
        self.send(protocol.Failure(code=code, message=message), rid)


@pytest.fixture
def no_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: threading.Thread) -> None:
        msg = "can't start new thread"
        raise RuntimeError(msg)

    monkeypatch.setattr(threading.Thread, "start", refuse)


@pytest.mark.usefixtures("no_threads")
def test_a_plain_operation_runs_on_the_loop_and_is_answered_once():
    agent = Agent()
    file_ops.serve(agent, 7, 5.0, lambda: (protocol.Done(), b""))  # type: ignore[arg-type]
    [(message, rid)] = agent.sent
    # Done as the sandbox user, or an honest failure where this test cannot
    # switch users (not root): answered either way, exactly once.
    assert rid == 7 and message.OP in ("done", "error")
    assert agent.file_ops == {}


@pytest.mark.usefixtures("no_threads")
def test_a_streaming_transfer_is_refused_honestly_rather_than_deadlocked():
    agent = Agent()
    agent.flows[8] = object()
    file_ops.serve(agent, 8, 5.0, lambda: (protocol.Done(), b""), streams=True)  # type: ignore[arg-type]
    [(message, rid)] = agent.sent
    assert rid == 8 and isinstance(message, protocol.Failure)
    assert message.code == protocol.LIMIT_EXCEEDED and "thread" in message.message
    assert agent.flows == {} and agent.file_ops == {}
