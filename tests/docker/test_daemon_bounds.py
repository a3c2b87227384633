"""The daemon's memory stays bounded whatever ids and limits a client sends."""

from __future__ import annotations

import gc
import json
import uuid

import grpc
import psutil
import pytest

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import ToolrtRpcError
from runtime.client.sdk import Result

MiB = 1 << 20


@pytest.mark.docker
def test_call_ids_over_256_bytes_are_refused_per_call_and_never_kept(client):
    with client.session() as session:
        long_id = "x" * 257
        result = session.call("shell", {"command": "echo ran"}, call_id=long_id)
        assert result.error_code == "INVALID_ARGUMENTS"
        assert "257 bytes" in result.error_message and "1 to 256" in result.error_message
        assert result.call_id == long_id
        fine = session.call("shell", {"command": "echo ran"}, call_id="y" * 256)
        assert fine.ok and fine.output["stdout"] == "ran\n"
        # In a batch only that call fails; the others run.
        calls = [
            pb.ToolCall(id=call_id, name="shell", arguments_json=json.dumps({"command": cmd}))
            for call_id, cmd in (("a" * 300, "echo one"), ("b", "echo two"))
        ]
        reply = client.stub.ExecuteBatch(pb.ExecuteBatchRequest(session_id=session.id, calls=calls))
        batch = [Result.from_pb(r) for r in reply.results]
        assert [r.error_code for r in batch] == ["INVALID_ARGUMENTS", ""]
        assert batch[1].output["stdout"] == "two\n"


@pytest.mark.docker
def test_huge_call_ids_leave_the_daemons_memory_flat(client):
    me = psutil.Process()

    def send(count: int) -> int:
        for _ in range(count):
            huge = uuid.uuid4().hex * (4 * MiB // 32)  # 4 MiB, distinct every time
            result = session.call("no_such_tool", {}, call_id=huge)
            assert result.error_code == "INVALID_ARGUMENTS"
        gc.collect()
        return int(me.memory_info().rss)

    with client.session() as session:
        warm = send(10)  # gRPC's and the allocator's buffers reach their size
        grown = send(40) - warm
        # Kept, 40 more 4 MiB ids would be 160 MiB.
        assert grown < 40 * MiB, f"RSS grew by {grown >> 20} MiB"


@pytest.mark.docker
def test_refused_calls_count_against_the_call_budget(client):
    with client.session(limits={"max_calls": 3}) as session:
        for _ in range(3):
            assert session.call("no_such_tool", {}).error_code == "UNKNOWN_TOOL"
        assert session.call("no_such_tool", {}).error_code == "BUDGET_EXHAUSTED"
        assert session.shell("true").error_code == "BUDGET_EXHAUSTED"


@pytest.mark.docker
def test_a_workspace_that_could_fill_the_memory_is_refused_at_creation(client):
    with pytest.raises(ToolrtRpcError) as refused:
        client.create_session(limits={"workspace_bytes": 400 * MiB, "memory_bytes": 512 * MiB})
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    details = refused.value.details
    assert str(400 * MiB) in details and str(512 * MiB) in details and "tmp_bytes" in details
    assert client.list_sessions() == []
    # The same sizes with enough memory are fine.
    with client.session(limits={"workspace_bytes": 400 * MiB, "memory_bytes": 1024 * MiB}) as ok:
        assert ok.shell("true").ok
