"""Fuzz the programs' RPCs (Exec, ReadFile, WriteFile, StatPath) against the
real daemon and engine: every answer is a reply or a status DESIGN lists
for them with an ErrorInfo reason, never INTERNAL; afterwards the daemon
serves as before (tests/fuzzing.py `watched`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client.errors import reason_of
from tests.fuzzing import (
    RPC_TIMEOUT_S,
    doubles,
    drawn,
    fuzz_settings,
    int64s,
    proto_paths,
    proto_text,
    string_maps,
    watched,
)

pytestmark = [pytest.mark.docker, pytest.mark.fuzz]

# DESIGN "Programs: exec and files": the statuses of their reasons.
STATUSES = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}


@pytest.fixture
def fuzzed(make_daemon, docker_client, caplog):
    with watched(make_daemon(), docker_client, caplog, limits={"call_timeout_s": 5}) as pair:
        yield pair


def answered(fn: Callable[[], Any]) -> Any:
    """`fn()`'s answer, or the documented status (with a reason) it ended with."""
    try:
        return fn()
    except grpc.RpcError as exc:
        failed = exc
    code, reason = failed.code(), reason_of(failed)
    assert code in STATUSES, f"{code}: {failed.details()}"
    assert reason, f"{code} without an ErrorInfo reason: {failed.details()}"
    return code


users = st.sampled_from(["", "sandbox", "1000", "root", "0", "nobody"]) | proto_text
starts = st.builds(
    pb.ExecStart,
    argv=st.lists(proto_text, max_size=4) | st.just(["true"]) | st.just(["cat"]),
    command=st.just("") | proto_text,
    cwd=st.just("") | proto_paths,
    env=string_maps,
    user=st.just("") | users,
    timeout_s=st.just(5.0) | doubles,
    tty=st.booleans(),
    stdin_open=st.booleans(),
    output_cap_bytes=st.just(0) | int64s,
    exec_id=st.just("") | proto_text,
)
follow_ups = st.lists(
    st.one_of(
        st.binary(max_size=100).map(lambda data: pb.ExecRequest(stdin=data)),
        st.just(pb.ExecRequest(stdin_eof=True)),
        (st.sampled_from(["INT", "TERM", "KILL", "SIGHUP", "NOPE", ""]) | proto_text).map(
            lambda name: pb.ExecRequest(signal=name)
        ),
        st.just(pb.ExecRequest(resize=pb.TerminalSize(rows=1, cols=1))),
        st.just(pb.ExecRequest(start=pb.ExecStart())),
        st.just(pb.ExecRequest()),
    ),
    max_size=4,
)


@given(start=drawn(starts), rest=drawn(follow_ups))
@fuzz_settings(30)
def test_exec_answers_any_start_and_follow_ups(fuzzed, start, rest):
    client, session = fuzzed
    first = pb.ExecRequest(start=start.value)
    first.start.session_id = session.id
    requests = [first, *rest.value]

    def run() -> list[Any]:
        return list(client.stub.Exec(iter(requests), timeout=RPC_TIMEOUT_S))

    answer = answered(run)
    if isinstance(answer, list):
        kinds = [event.WhichOneof("kind") for event in answer]
        assert kinds[0] == "started" and kinds[-1] == "exit", kinds
    event(f"exec: {answer.name if isinstance(answer, grpc.StatusCode) else 'ran'}")


@given(
    path=drawn(proto_paths | st.sampled_from(["/dev/zero", "/proc/self/mem", "/etc", "x"])),
    user=drawn(st.just("") | users),
    offset=drawn(st.just(0) | int64s),
    max_bytes=drawn(st.just(0) | int64s),
)
@fuzz_settings(30)
def test_read_and_stat_answer_any_path(fuzzed, path, user, offset, max_bytes):
    client, session = fuzzed
    request = pb.ReadFileRequest(
        session_id=session.id,
        path=path.value,
        user=user.value,
        offset=offset.value,
        max_bytes=max_bytes.value,
    )
    read = answered(lambda: list(client.stub.ReadFile(request, timeout=RPC_TIMEOUT_S)))
    stat = answered(
        lambda: client.stub.StatPath(
            pb.StatPathRequest(session_id=session.id, path=path.value, user=user.value),
            timeout=RPC_TIMEOUT_S,
        )
    )
    event(f"read: {read.name if isinstance(read, grpc.StatusCode) else 'ok'}")
    event(f"stat: {stat.name if isinstance(stat, grpc.StatusCode) else 'ok'}")


@given(
    start=drawn(
        st.builds(
            pb.WriteFileStart,
            path=proto_paths | st.just("/tmp/f"),
            user=st.just("") | users,
            mode=st.just(0) | st.integers(0, 2**32 - 1),
            make_parents=st.booleans(),
            if_exists=st.sampled_from(["", "replace", "fail", "append"]) | proto_text,
        )
    ),
    data=drawn(st.lists(st.binary(max_size=1000), max_size=3)),
)
@fuzz_settings(30)
def test_write_answers_any_start(fuzzed, start, data):
    client, session = fuzzed
    first = pb.WriteFileRequest(start=start.value)
    first.start.session_id = session.id
    requests = [first, *(pb.WriteFileRequest(data=piece) for piece in data.value)]
    answer = answered(lambda: client.stub.WriteFile(iter(requests), timeout=RPC_TIMEOUT_S))
    event(f"write: {answer.name if isinstance(answer, grpc.StatusCode) else 'ok'}")
