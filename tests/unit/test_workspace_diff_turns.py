"""workspace_diff reads a workspace into the daemon: its calls take turns,
one per session and `shares.workspace_diffs_per_tenant` per tenant (fake backend)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import Client
from runtime.snapshots import workspace_diff


def test_diffs_run_one_per_session_and_two_per_tenant(make_daemon, monkeypatch):
    running = make_daemon(backend="fake", shares={"workspace_diffs_per_tenant": 2})
    inside, most = 0, 0

    async def reading(chunks: Any, *args: Any) -> dict[str, Any]:
        nonlocal inside, most
        await chunks.aclose()
        inside += 1
        most = max(most, inside)
        await asyncio.sleep(0.05)  # room for any other call to come in
        inside -= 1
        return {}

    monkeypatch.setattr(workspace_diff, "workspace_now", reading)
    calls = [pb.ToolCall(id=f"d{i}", name="workspace_diff", arguments_json="{}") for i in range(4)]
    with Client(running.target) as client:
        sessions = [client.create_session() for _ in range(3)]
        answers: list[Any] = []

        def batch(session_id: str) -> None:
            request = pb.ExecuteBatchRequest(session_id=session_id, calls=calls)
            answers.extend(client.stub.ExecuteBatch(request).results)

        def batches(*ids: str) -> None:
            threads = [threading.Thread(target=batch, args=(i,)) for i in ids]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)

        batches(sessions[0].id)
        assert most == 1
        batches(*(s.id for s in sessions))
        assert most <= 2
    empty = {"changes": [], "truncated": False}
    assert [json.loads(r.output_json) for r in answers] == [empty] * 16
