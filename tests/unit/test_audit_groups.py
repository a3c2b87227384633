"""Calls' audit records written in groups: the calls finishing together share
one write, and each is released only once its records are in the kernel."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from runtime.audit import AuditLog
from runtime.auth.principals import TOKEN, Principal
from runtime.errors import AuditUnavailable
from runtime.models import ToolCall, ToolResult

ALICE = Principal("alice", "0123456789ab", TOKEN)


def _record(audit: AuditLog, call_id: str) -> asyncio.Future[None]:
    call, result = ToolCall(call_id, "shell", "{}"), ToolResult(call_id, {})
    return asyncio.ensure_future(audit.record_calls(ALICE, "sid", [call], [result]))


def test_calls_finishing_together_share_one_write_and_wait_for_it(tmp_path, monkeypatch):
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(str(path))
    audit.session("session.create", ALICE, "sid")  # the file is open
    pending: list[asyncio.Future[None]] = []
    released_before_write: list[int] = []
    write = os.write

    def counted(fd: int, data: bytes) -> int:
        if fd == audit._fd:
            released_before_write.append(sum(p.done() for p in pending))
        return write(fd, data)

    async def together() -> None:
        pending.extend(_record(audit, f"c{i}") for i in range(10))
        await asyncio.gather(*pending)

    monkeypatch.setattr(os, "write", counted)
    asyncio.run(together())
    audit.close()
    assert released_before_write == [0]  # one write, and nobody answered before it
    ids = [json.loads(line)["call_id"] for line in path.read_text().splitlines()[1:]]
    assert ids == [f"c{i}" for i in range(10)]


def test_a_log_that_cannot_be_written_fails_every_call_of_the_group(tmp_path):
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(str(path))
    audit.session("session.create", ALICE, "sid")
    os.unlink(path)
    os.mkdir(path)  # the log's path is now a directory: it cannot be reopened

    async def together() -> list[object]:
        return await asyncio.gather(
            *(_record(audit, f"c{i}") for i in range(3)), return_exceptions=True
        )

    outcomes = asyncio.run(together())
    assert all(isinstance(o, AuditUnavailable) for o in outcomes)
    with pytest.raises(AuditUnavailable):
        audit.check()
    audit.close()
