"""The agent protocol: typed messages, frames, resync, and the client's error edge."""

from __future__ import annotations

import asyncio

import pytest

from runtime.agent import protocol, records
from runtime.errors import (
    EngineUnavailable,
    FileMissing,
    InternalFailure,
    InvalidArguments,
    LimitExceeded,
    PathDenied,
    SandboxLost,
)
from runtime.sandbox.agent_client import AgentClient
from runtime.sandbox.framing import AgentConnection
from tests.helpers import Pipe


def frames(*messages: protocol.Message, epoch: int = 5) -> bytes:
    return b"".join(protocol.encode(m, i + 1, epoch) for i, m in enumerate(messages))


@pytest.mark.parametrize("message", [cls() for cls in protocol.BY_OP.values()])
def test_every_message_round_trips_with_its_defaults(message):
    [frame] = protocol.Decoder().feed(frames(message))
    assert frame.message() == message
    assert (frame.request_id, frame.epoch) == (1, 5)


def test_nested_messages_and_bodies_round_trip():
    result = protocol.ExecResult(
        call_id="c\udcff1",
        exit_code=None,
        stdout=protocol.CaptureInfo(head=2, tail=1, total=9, dropped_lines=3),
        shell_state=protocol.ShellReport(cwd="/workspace", env={"A": "1"}),
        background=protocol.ProcessInfo(process_id="p1", pid=7, exit_code=None),
        notes=["a note"],
    )
    [frame] = protocol.Decoder().feed(protocol.encode(result, 3, 9, b"\x00raw\xff"))
    assert frame.as_type(protocol.ExecResult) == result
    assert frame.body == b"\x00raw\xff"


def test_every_request_has_exactly_one_reply_type_in_the_client():
    # Each op name is unique across requests, replies and events.
    ops = [m.OP for m in protocol.REQUESTS + protocol.REPLIES + protocol.EVENTS]
    assert len(ops) == len(set(ops))


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"timeout_s": "10"}, "Exec.timeout_s: expected float, got str"),
        ({"timeout_s": True}, "Exec.timeout_s: expected float, got bool"),
        ({"max_background": 1.5}, "Exec.max_background: expected int, got float"),
        ({"env": ["A=1"]}, "Exec.env: expected an object"),
        ({"env": {"A": 1}}, "Exec.env: expected str, got int"),
    ],
)
def test_a_field_of_the_wrong_type_is_refused_not_half_built(data, error):
    with pytest.raises(protocol.FrameError, match=error):
        protocol.from_dict(protocol.Exec, data)


def test_an_int_is_accepted_where_a_float_is_expected():
    assert protocol.from_dict(protocol.Exec, {"timeout_s": 3}).timeout_s == 3.0


def test_decoder_takes_frames_split_at_any_byte():
    data = frames(protocol.Ping(), protocol.Read(path="/workspace/a"), protocol.Pong())
    for cut in range(1, len(data)):
        decoder = protocol.Decoder()
        got = decoder.feed(data[:cut]) + decoder.feed(data[cut:])
        assert [f.op for f in got] == ["ping", "read", "pong"]


def test_decoder_skips_garbage_before_a_frame_and_resyncs_after_half_a_frame():
    decoder = protocol.Decoder()
    whole = frames(protocol.Ping())
    assert decoder.feed(b"noise" + whole[:7]) == []
    # The writer died mid-frame; the next writer's frames are found again.
    decoder.resync()
    [frame] = decoder.feed(b"TR" + frames(protocol.Pong()))
    assert frame.op == "pong"
    assert decoder.skipped == len(b"noise") + 7 + 2


@pytest.mark.parametrize(
    "raw",
    [
        protocol.PREFIX.pack(protocol.MAGIC, 2, 0) + b"[]",
        protocol.PREFIX.pack(protocol.MAGIC, 3, 0) + b"{x}",
        protocol.PREFIX.pack(protocol.MAGIC, 2, 0) + b"{}",
        protocol.PREFIX.pack(protocol.MAGIC, protocol.MAX_HEADER + 1, 0),
    ],
    ids=["not-an-object", "not-json", "no-op-or-id", "too-large"],
)
def test_malformed_frames_are_frame_errors(raw):
    with pytest.raises(protocol.FrameError):
        protocol.Decoder().feed(raw)


# -- the daemon's side -------------------------------------------------------
async def answer(reply: protocol.Message, epoch: int = 11, body: bytes = b"") -> tuple:
    pipe = Pipe()
    connection = AgentConnection("test", pipe, pipe, epoch=11)
    connection.start()
    client = AgentClient(connection)
    task = asyncio.ensure_future(client.read(protocol.Read(path="/workspace/f")))
    while not pipe.written:
        await asyncio.sleep(0.001)
    [sent] = protocol.Decoder().feed(pipe.written[0])
    if epoch != 11:
        # A frame of another epoch (an earlier daemon's) is never taken as the answer.
        pipe.replies.put_nowait(protocol.encode(reply, sent.request_id, epoch, body))
        await asyncio.sleep(0.01)
        assert not task.done()
    pipe.replies.put_nowait(protocol.encode(reply, sent.request_id, 11, body))
    try:
        return sent, await asyncio.wait_for(task, 5)
    finally:
        connection.close()


def test_the_client_sends_typed_requests_and_returns_typed_replies():
    sent, (reply, body) = asyncio.run(answer(protocol.ReadReply(total_lines=2), body=b"a\nb\n"))
    assert sent.as_type(protocol.Read) == protocol.Read(path="/workspace/f")
    assert sent.epoch == 11
    assert reply == protocol.ReadReply(total_lines=2)
    assert body == b"a\nb\n"


def test_frames_of_another_epoch_are_dropped():
    _, (reply, _) = asyncio.run(answer(protocol.ReadReply(size=1), epoch=3))
    assert reply.size == 1


@pytest.mark.parametrize(
    ("code", "failure"),
    [
        ("NOT_FOUND", FileMissing),
        ("PATH_DENIED", PathDenied),
        ("LIMIT_EXCEEDED", LimitExceeded),
        ("INVALID_ARGUMENTS", InvalidArguments),
        ("INTERNAL", InternalFailure),
        ("SOMETHING_NEW", InternalFailure),
    ],
)
def test_agent_error_codes_map_to_tool_failures_in_one_place(code, failure):
    with pytest.raises(failure) as caught:
        asyncio.run(answer(protocol.Failure(code=code, message="why")))
    assert type(caught.value) is failure
    assert caught.value.message == "why"


def test_a_reply_of_the_wrong_type_is_internal_not_a_crash():
    with pytest.raises(InternalFailure, match="malformed frame"):
        asyncio.run(answer(protocol.Pong()))


def test_a_reply_with_a_wrong_field_type_is_internal_not_a_crash():
    bad = protocol.ReadReply()
    object.__setattr__(bad, "total_lines", "many")
    with pytest.raises(InternalFailure, match="ReadReply.total_lines"):
        asyncio.run(answer(bad))


async def lost_while_waiting() -> None:
    pipe = Pipe()
    connection = AgentConnection("test", pipe, pipe, epoch=1)
    connection.start()
    task = asyncio.ensure_future(AgentClient(connection).ping())
    await asyncio.sleep(0)
    pipe.replies.put_nowait(b"")  # the agent went away
    await asyncio.wait_for(task, 5)


def test_an_agent_that_goes_away_fails_pending_requests_as_sandbox_lost():
    with pytest.raises(SandboxLost):
        asyncio.run(lost_while_waiting())


def test_hello_refuses_another_protocol_version():
    async def hello() -> None:
        pipe = Pipe()
        connection = AgentConnection("test", pipe, pipe, epoch=1)
        connection.start()
        task = asyncio.ensure_future(AgentClient(connection).hello(5))
        while not pipe.written:
            await asyncio.sleep(0.001)
        [sent] = protocol.Decoder().feed(pipe.written[0])
        old = records.replace(protocol.HelloReply(), version=protocol.VERSION - 1)
        pipe.replies.put_nowait(protocol.encode(old, sent.request_id, 1))
        try:
            await task
        finally:
            connection.close()

    with pytest.raises(EngineUnavailable, match="protocol version"):
        asyncio.run(hello())
