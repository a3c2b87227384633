"""Calls' audit records written off the event loop, concurrent calls' together,
each call released only once its records are in the kernel."""

from __future__ import annotations

import asyncio
import json
import os
import threading

import pytest

from runtime.audit import AuditLog
from runtime.auth.principals import TOKEN, Principal
from runtime.errors import AuditUnavailable
from runtime.models import ToolCall, ToolResult

ALICE = Principal("alice", "0123456789ab", TOKEN)


async def _record_while_busy(audit: AuditLog, count: int) -> list[object]:
    release = threading.Event()
    audit._writer.submit(release.wait)
    pending = [
        asyncio.ensure_future(
            audit.record_calls(
                ALICE, "sid", [ToolCall(f"c{i}", "shell", "{}")], [ToolResult(f"c{i}", {})]
            )
        )
        for i in range(count)
    ]
    await asyncio.sleep(0)
    # No call is released before its record is written.
    assert not any(p.done() for p in pending)
    release.set()
    return list(await asyncio.gather(*pending, return_exceptions=True))


def test_concurrent_calls_records_go_in_one_write(tmp_path, monkeypatch):
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(str(path))
    audit.session("session.create", ALICE, "sid")  # the file is open
    writes: list[int] = []
    write = os.write

    def counted(fd: int, data: bytes) -> int:
        if fd == audit._fd:
            writes.append(len(data))
        return write(fd, data)

    monkeypatch.setattr(os, "write", counted)
    try:
        assert asyncio.run(_record_while_busy(audit, 10)) == [None] * 10
    finally:
        audit.close()
    assert len(writes) == 1
    ids = [json.loads(line)["call_id"] for line in path.read_text().splitlines()[1:]]
    assert ids == [f"c{i}" for i in range(10)]


def test_a_log_that_cannot_be_written_fails_every_call_of_the_group(tmp_path):
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(str(path))
    audit.session("session.create", ALICE, "sid")
    path.chmod(0o400)
    os.unlink(path)
    os.mkdir(path)  # the log's path is now a directory: it cannot be reopened
    try:
        outcomes = asyncio.run(_record_while_busy(audit, 3))
        assert all(isinstance(o, AuditUnavailable) for o in outcomes)
        with pytest.raises(AuditUnavailable):
            audit.check()
    finally:
        audit.close()
