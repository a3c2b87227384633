"""What durable state costs per call: the journal's group commit (concurrent
calls' rows share one transaction, each caller returns only once its row is
stored, one bad row fails only its own call), and acknowledgements to the
agent sent many to a frame."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable

from runtime.agent import protocol
from runtime.client import Client
from runtime.errors import StateUnavailable
from runtime.models import ToolResult
from runtime.sandbox.agent_client import AgentClient
from runtime.sandbox.fake import FakeBackend
from runtime.sessions.adoption import ACK_CALLS
from runtime.state.db import StateDB
from runtime.state.durable import CHECKPOINT_EVERY, COMPONENTS, INLINE_COMMIT_BYTES, Durable
from runtime.state.journal_store import DONE, JournalStore
from tests.conftest import config_for_test, start_daemon


def _durable(tmp_path) -> tuple[Durable, list[str]]:
    durable = Durable(StateDB.open(str(tmp_path), COMPONENTS), config_for_test())
    commits: list[str] = []
    durable.db.conn.set_trace_callback(
        lambda sql: commits.append(sql) if sql.strip().upper() == "COMMIT" else None
    )
    return durable, commits


def _threads_running(durable: Durable, wanted: Callable[[str], bool]) -> list[str]:
    """The names of the threads that run each statement `wanted` selects, from now on."""
    threads: list[str] = []
    durable.db.conn.set_trace_callback(
        lambda sql: threads.append(threading.current_thread().name) if wanted(sql) else None
    )
    return threads


def _busy(durable: Durable) -> threading.Event:
    """Holds the writer thread, in a transaction, until the returned event is set."""
    release = threading.Event()
    held = threading.Event()

    def hold() -> None:
        with durable.db.lock:
            held.set()
            release.wait()

    durable._writer.submit(hold)
    held.wait()
    return release


async def _finish_all(durable: Durable, ids: list[str]) -> list[object]:
    release = _busy(durable)
    calls = [
        asyncio.ensure_future(
            durable.call_finished("s1", cid, "fp", ToolResult(cid, {"n": 1}), (1, 0.0, "{}"))
        )
        for cid in ids
    ]
    await asyncio.sleep(0)
    # Nothing is answered while its row is not committed.
    assert not any(c.done() for c in calls)
    release.set()
    return list(await asyncio.gather(*calls, return_exceptions=True))


def test_concurrent_calls_share_one_commit_and_return_once_stored(tmp_path):
    durable, commits = _durable(tmp_path)
    try:
        ids = [f"c{i}" for i in range(20)]
        assert asyncio.run(_finish_all(durable, ids)) == [None] * 20
        assert len(commits) == 1
        rows = JournalStore(durable.db).rows("s1")
        assert [(r.call_id, r.status) for r in rows] == [(cid, DONE) for cid in ids]
    finally:
        durable.close()


def test_a_row_that_fails_fails_its_own_call_only(tmp_path, monkeypatch):
    durable, _ = _durable(tmp_path)
    finish = durable.journal.finish

    def failing(session_id: str, call_id: str, fingerprint: str, result: ToolResult) -> None:
        finish(session_id, call_id, fingerprint, result)
        if call_id == "bad":
            msg = "disk I/O error"
            raise sqlite3.OperationalError(msg)

    monkeypatch.setattr(durable.journal, "finish", failing)
    try:
        outcomes = asyncio.run(_finish_all(durable, ["a", "bad", "b"]))
        assert outcomes[0] is None and outcomes[2] is None
        assert isinstance(outcomes[1], StateUnavailable)
        assert durable.path in str(outcomes[1])
        stored = [r.call_id for r in JournalStore(durable.db).rows("s1")]
        assert stored == ["a", "b"]
    finally:
        durable.close()


def test_stored_results_are_acknowledged_to_the_agent_many_to_a_frame(tmp_path, monkeypatch):
    acks: list[list[str]] = []

    async def ack(agent: AgentClient, call_ids: list[str]) -> None:
        acks.append(call_ids)

    monkeypatch.setattr(AgentClient, "ack", ack)
    backend = FakeBackend()
    backend.script(lambda req: (protocol.ExecResult(exit_code=0), b""))
    running = start_daemon(config_for_test(state_dir=str(tmp_path)), backend=backend)
    try:
        with Client(running.target) as client:
            session = client.create_session()
            ids = [f"call-{i}" for i in range(ACK_CALLS + 3)]
            for call_id in ids:
                assert client.call(session.id, "shell", {"command": "true"}, call_id=call_id).ok
            # One frame for the first ACK_CALLS calls (each answered once stored);
            # the rest wait for the next batch or the delay.
            assert acks[0] == ids[:ACK_CALLS]
            assert sum(map(len, acks)) <= len(ids) and len(acks) <= 2
    finally:
        running.stop()


def test_a_call_on_an_idle_writer_is_stored_when_it_returns(tmp_path):
    """Committed at once (no round on the writer thread), and stored."""
    durable, _ = _durable(tmp_path)
    threads = _threads_running(durable, lambda sql: sql == "COMMIT")

    async def one() -> None:
        await durable.call_finished("s1", "c1", "fp", ToolResult("c1", {"n": 1}))
        assert [r.call_id for r in JournalStore(durable.db).rows("s1")] == ["c1"]

    try:
        asyncio.run(one())
        assert threads == [threading.main_thread().name]
    finally:
        durable.close()


def test_a_large_result_is_committed_on_the_writer_thread(tmp_path):
    """Copying it into the log on the loop would hold every other call."""
    durable, _ = _durable(tmp_path)
    threads = _threads_running(durable, lambda sql: sql == "COMMIT")
    large = ToolResult("c1", {"stdout": "x" * (INLINE_COMMIT_BYTES + 1)})

    async def one() -> None:
        await durable.call_finished("s1", "c1", "fp", large)
        assert [r.call_id for r in JournalStore(durable.db).rows("s1")] == ["c1"]

    try:
        asyncio.run(one())
        assert len(threads) == 1
        assert threads[0] != threading.main_thread().name
    finally:
        durable.close()


def test_checkpoints_keep_the_log_small_and_run_on_the_writer_thread(tmp_path):
    durable, _ = _durable(tmp_path)
    checkpoints = _threads_running(durable, lambda sql: "wal_checkpoint" in sql)
    wal = tmp_path / "state.sqlite3-wal"

    async def many(n: int) -> int:
        largest = 0
        for i in range(n):
            result = ToolResult(f"c{i}", {"out": "x" * 2000})
            await durable.call_finished("s1", f"c{i}", "fp", result, (i, 0.0, "{}"))
            largest = max(largest, wal.stat().st_size)
        return largest

    try:
        # SQLite's own checkpoint is off: it would run inside a commit on the loop.
        assert durable.db.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        largest = asyncio.run(many(3 * CHECKPOINT_EVERY))
        assert len(checkpoints) >= 2
        assert not any(name == threading.main_thread().name for name in checkpoints)
        # Without checkpoints the log would hold every commit: 600 of them,
        # each a page or more of 4 KiB.
        assert largest < 2 * CHECKPOINT_EVERY * 4096 * 4
    finally:
        durable.close()


def test_only_calls_that_may_act_unrecorded_are_recorded_as_started(tmp_path):
    """A start record costs a commit: write_file (resumable), read_file
    (read-only) and a call naming no tool (nothing runs) go without one;
    edit_file, which the agent cannot vouch for, does not."""
    backend = FakeBackend()
    running = start_daemon(config_for_test(state_dir=str(tmp_path)), backend=backend)
    try:
        with Client(running.target) as client:
            session = client.create_session()
            durable = running.daemon.core.durable
            starts = _threads_running(durable, lambda sql: "'running'" in sql)
            write = {"path": "a.txt", "content": "one\n"}
            for tool, arguments in [
                ("write_file", write),
                ("read_file", {"path": "a.txt"}),
                ("no_such_tool", {}),
            ]:
                client.call(session.id, tool, arguments)
            assert starts == []
            edit = {"path": "a.txt", "old_string": "one", "new_string": "two"}
            assert client.call(session.id, "edit_file", edit).ok
            assert len(starts) == 1
    finally:
        running.stop()


def test_the_journal_is_trimmed_to_its_bounds_apart_from_the_calls_commits(tmp_path):
    config = config_for_test(journal_max_results=2, journal_max_ids=3)
    durable = Durable(StateDB.open(str(tmp_path), COMPONENTS), config)
    trims = _threads_running(durable, lambda sql: sql.startswith("DELETE FROM journal"))

    async def calls(n: int) -> None:
        for i in range(n):
            await durable.call_finished("s1", f"c{i}", "fp", ToolResult(f"c{i}", {"i": i}))
        # The writer's queue runs in order: a read after the trims sees them done.
        rows = await durable.journal_rows("s1")
        assert [r.call_id for r in rows if r.result is not None] == [f"c{n - 2}", f"c{n - 1}"]
        assert len(rows) == 5

    try:
        asyncio.run(calls(128))  # trims are due every 64 results
        assert len(trims) == 2
        assert threading.main_thread().name not in trims
    finally:
        durable.close()
