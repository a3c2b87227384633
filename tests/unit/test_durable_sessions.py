"""Sessions and the call journal survive the daemon (fake backend: sandboxes
outlive a core like containers do, so a second core re-adopts them)."""

from __future__ import annotations

import asyncio
import io
import tarfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.agent import protocol
from runtime.client import Client, ToolrtRpcError
from runtime.models import ToolErrorInfo, ToolResult
from runtime.sandbox.backend import SandboxSpec
from runtime.sandbox.fake import FakeBackend
from runtime.state.db import StateDB
from runtime.state.journal_store import JOURNAL, JournalStore
from tests.conftest import RunningDaemon, config_for_test, start_daemon


@pytest.fixture
def restarts(tmp_path) -> Iterator[Any]:
    """start(**overrides): a daemon on one FakeBackend and one state_dir; the
    previous one is stopped first (shutdown "keep" unless told), or dropped
    without stopping (`crash=True`), like a kill -9."""
    backend = FakeBackend()
    state: dict[str, Any] = {"running": None, "instance": "durable-test"}

    def start(crash: bool = False, **overrides: Any) -> RunningDaemon:
        previous = state["running"]
        if previous is not None:
            if crash:
                # No shutdown of sessions: only the server and the database go.
                previous.run(previous.daemon.server.stop(0))
                previous.daemon.core.durable.close()
                previous.loop.call_soon_threadsafe(previous.loop.stop)
                previous.thread.join(10)
            else:
                previous.stop()
        values = {"state_dir": str(tmp_path), "shutdown": "keep", "instance": "durable-test"}
        values.update(overrides)
        state["running"] = start_daemon(config_for_test(**values), backend=backend)
        return state["running"]  # type: ignore[no-any-return]

    start.backend = backend  # type: ignore[attr-defined]
    yield start
    if state["running"] is not None:
        state["running"].stop()


def echo(request: protocol.Exec) -> Any:
    return protocol.ExecResult(exit_code=0), request.command.encode()


def test_a_closed_session_is_remembered_with_its_reason_across_restarts(restarts):
    first = restarts()
    with Client(first.target) as client:
        session = client.create_session(labels={"team": "a"})
        assert client.close_session(session.id) == "closed"
        closed = client.get_session(session.id)
        assert (closed.state, closed.closed_reason) == ("closed", "closed")
    second = restarts()
    with Client(second.target) as client:
        closed = client.get_session(session.id)
        assert (closed.state, closed.closed_reason) == ("closed", "closed")
        assert closed.labels == {"team": "a"} and closed.created_at == session.created_at
        assert client.close_session(session.id) == "closed"  # idempotent across restarts
        assert client.list_sessions() == []
        with pytest.raises(ToolrtRpcError) as err:
            client.call(session.id, "shell", {"command": "true"})
        assert err.value.code == grpc.StatusCode.NOT_FOUND


def test_another_tenants_closed_session_stays_not_found(restarts):
    running = restarts()
    with Client(running.target) as client:
        session = client.create_session()
        client.close_session(session.id)
    manager = running.daemon.core.manager
    with pytest.raises(Exception, match="no open session"):
        running.run(manager.describe("someone-else", session.id))


def test_a_session_is_readopted_with_its_files_journal_and_clocks(restarts):
    first = restarts()
    first.daemon.core.backend.script(echo)
    with Client(first.target) as client:
        session = client.create_session(ttl_seconds=3600, idle_seconds=600)
        assert client.call(session.id, "write_file", {"path": "a.txt", "content": "kept"}).ok
        answered = client.call(session.id, "shell", {"command": "echo 1"}, call_id="c-1")
        assert answered.ok
    execs = len(restarts.backend.execs())
    second = restarts()
    with Client(second.target) as client:
        [again] = client.list_sessions()
        assert again.id == session.id and again.calls == 2
        assert again.created_at == session.created_at and again.expires_at == session.expires_at
        repeat = client.call(session.id, "shell", {"command": "echo 1"}, call_id="c-1")
        assert repeat.output == answered.output  # from the journal: not run again
        assert len(restarts.backend.execs()) == execs
        read = client.call(session.id, "read_file", {"path": "a.txt"})
        assert read.output["content"] == "kept"
        different = client.call(session.id, "shell", {"command": "echo 2"}, call_id="c-1")
        assert different.error_code == "INVALID_ARGUMENTS"
    live = second.daemon.core.manager.get("default", session.id)
    assert 0 <= time.monotonic() - live.last_used < 60


def test_workspace_diff_compares_with_the_same_start_after_a_restart(restarts):
    first = restarts()
    seed = io.BytesIO()
    with tarfile.open(fileobj=seed, mode="w") as tar:
        data = b"seeded\n"
        member = tarfile.TarInfo("a.txt")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    with Client(first.target) as client:
        session = client.create_session(workspace_tar=seed.getvalue())
    second = restarts()  # before any call: only the session's creation stored its state
    with Client(second.target) as client:
        assert client.call(session.id, "write_file", {"path": "a.txt", "content": "changed\n"}).ok
        diff = client.call(session.id, "workspace_diff", {})
        assert diff.ok, diff
        assert [(c["path"], c["status"]) for c in diff.output["changes"]] == [
            ("/workspace/a.txt", "modified")
        ]


def test_state_without_a_sandbox_is_closed_as_lost_and_a_sandbox_without_state_removed(
    restarts,
):
    first = restarts()
    with Client(first.target) as client:
        session = client.create_session()
    first.stop()
    backend = restarts.backend
    # While the daemon is down: its sandbox vanishes, and one nobody recorded appears.
    del backend.sandboxes[session.id], backend.channels[session.id]
    asyncio.run(backend.create(SandboxSpec("orphan", "img", first.daemon.config.defaults)))
    second = restarts()
    with Client(second.target) as client:
        lost = client.get_session(session.id)
        assert (lost.state, lost.closed_reason) == ("closed", "sandbox_lost")
        assert client.list_sessions() == []
        # Its calls say why, and uploads too (not "no such session").
        answer = client.call(session.id, "shell", {"command": "true"}, call_id="late")
        assert answer.error_code == "SANDBOX_LOST" and "closed" in answer.error_message
        with pytest.raises(ToolrtRpcError) as err:
            client.upload(session.id, b"")
        assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "orphan" not in backend.sandboxes


def test_a_call_cut_off_by_a_restart_answers_its_real_result_on_retry(restarts):
    release = threading.Event()
    runs: list[str] = []

    async def slow(request: protocol.Exec) -> Any:
        runs.append(request.call_id)
        while not release.is_set():
            await asyncio.sleep(0.01)
        return protocol.ExecResult(exit_code=7), b"done"

    first = restarts()
    first.daemon.core.backend.script(slow)
    with Client(first.target) as client:
        session = client.create_session()
        outcome: dict[str, Any] = {}

        def call() -> None:
            try:
                client.call(session.id, "shell", {"command": "x"}, call_id="slow")
            except ToolrtRpcError as exc:
                outcome["code"] = exc.code

        caller = threading.Thread(target=call)
        caller.start()
        deadline = time.monotonic() + 10
        while not runs and time.monotonic() < deadline:
            time.sleep(0.01)
        first.stop()  # shutdown = "keep": the call is UNAVAILABLE, and runs on
        caller.join(10)
    assert outcome["code"] == grpc.StatusCode.UNAVAILABLE
    # The fake's command cannot outlive its daemon's event loop: what a real
    # agent does meanwhile (tests/docker/test_restarts.py) is to finish and
    # keep the answer until a daemon acknowledges it.
    channel = restarts.backend.channels[session.id]
    channel.kept["slow"] = (protocol.ExecResult(call_id="slow", exit_code=7), b"done")
    channel.kept["slow"][0].stdout = protocol.CaptureInfo(head=4, total=4)
    second = restarts()
    release.set()
    with Client(second.target) as client:
        result = client.call(session.id, "shell", {"command": "x"}, call_id="slow")
    assert result.ok and result.output["exit_code"] == 7 and result.output["stdout"] == "done"
    assert runs == ["slow"]  # once, whatever the retries


def test_a_write_file_cut_off_by_a_crash_is_answered_from_the_agent_not_written_again(restarts):
    first = restarts()
    with Client(first.target) as client:
        session = client.create_session()
        client.call(session.id, "write_file", {"path": "f.txt", "content": "old"}, call_id="w0")
    # The window write_file has no start record for: the agent wrote and
    # kept the answer, the daemon died before storing it (and the file
    # changed since).
    second = restarts(crash=True)
    channel = restarts.backend.channels[session.id]
    channel.kept["w1"] = (protocol.WriteReply(bytes_written=3), b"")
    channel.files["/workspace/f.txt"] = b"later"
    writes = len([r for _, r in restarts.backend.requests if isinstance(r, protocol.Write)])
    with Client(second.target) as client:
        result = client.call(
            session.id, "write_file", {"path": "f.txt", "content": "new"}, call_id="w1"
        )
        fresh = client.call(
            session.id, "write_file", {"path": "g.txt", "content": "g"}, call_id="w2"
        )
    assert result.ok and result.output["bytes_written"] == 3
    assert channel.files["/workspace/f.txt"] == b"later"  # answered, not written again
    assert fresh.ok and channel.files["/workspace/g.txt"] == b"g"
    resumed = [r for _, r in restarts.backend.requests if isinstance(r, protocol.Write)][writes:]
    assert [(r.call_id, r.resume) for r in resumed] == [("w1", True), ("w2", True)]


def test_a_crash_loses_nothing_answered(restarts):
    first = restarts()
    first.daemon.core.backend.script(echo)
    with Client(first.target) as client:
        session = client.create_session()
        answered = [
            client.call(session.id, "shell", {"command": f"echo {i}"}, call_id=f"c{i}")
            for i in range(5)
        ]
    second = restarts(crash=True)
    second.daemon.core.backend.script(echo)
    with Client(second.target) as client:
        again = [
            client.call(session.id, "shell", {"command": f"echo {i}"}, call_id=f"c{i}")
            for i in range(5)
        ]
    assert [r.output for r in again] == [r.output for r in answered]
    assert len(restarts.backend.execs()) == 5


def test_shutdown_close_closes_sessions_with_reason_shutdown(restarts):
    first = restarts(shutdown="close")
    with Client(first.target) as client:
        session = client.create_session()
    second = restarts()
    with Client(second.target) as client:
        closed = client.get_session(session.id)
        assert (closed.state, closed.closed_reason) == ("closed", "shutdown")
    assert session.id not in restarts.backend.sandboxes


def test_journal_rows_keep_results_then_ids_within_bounds(tmp_path):
    db = StateDB.open(str(tmp_path), [JOURNAL])
    store = JournalStore(db, max_results=2, max_ids=3)
    store.begin("s", "running", "fp")
    for i in range(128):  # trimmed every 64 results
        error = ToolErrorInfo("TIMEOUT", "slow", False) if i % 2 else None
        if store.finish("s", f"c{i}", f"fp{i}", ToolResult(f"c{i}", {"i": i}, error, i)):
            store.trim("s")
    rows = store.rows("s")
    done = [r for r in rows if r.result is not None]
    assert [r.call_id for r in done] == ["c126", "c127"]
    assert done[1].result == ToolResult("c127", {"i": 127}, ToolErrorInfo("TIMEOUT", "slow"), 127)
    assert [(r.call_id, r.status) for r in rows[:3]] == [
        (f"c{i}", "forgotten") for i in (123, 124, 125)
    ]
    assert len(rows) == 5
    store.drop("s")
    assert store.rows("s") == []


def test_a_state_database_that_cannot_be_written_refuses_new_work_and_loses_nothing(restarts):
    running = restarts()
    running.daemon.core.backend.script(echo)
    conn = running.daemon.core.durable.db.conn
    with Client(running.target) as client:
        session = client.create_session()
        answered = client.call(session.id, "shell", {"command": "echo 1"}, call_id="c-1")
        conn.execute("PRAGMA query_only = ON")  # as a full disk or a read-only file would
        try:
            for refused in (
                client.create_session,
                lambda: client.call(session.id, "shell", {"command": "echo 2"}, call_id="c-2"),
            ):
                with pytest.raises(ToolrtRpcError) as err:
                    refused()
                assert err.value.code == grpc.StatusCode.UNAVAILABLE
                assert running.daemon.core.durable.path in err.value.details
            assert [s.id for s in client.list_sessions()] == [session.id]
            again = client.call(session.id, "shell", {"command": "echo 1"}, call_id="c-1")
            assert again.output == answered.output  # what was acknowledged stays
        finally:
            conn.execute("PRAGMA query_only = OFF")
        # Writable again: the refused call was never started, so it runs now.
        assert client.call(session.id, "shell", {"command": "echo 2"}, call_id="c-2").ok
    assert [e.command for e in restarts.backend.execs()] == ["echo 1", "echo 2"]


def test_sigterm_keep_ends_streams_and_batches_unavailable_too(restarts):
    started = threading.Event()

    async def hang(request: protocol.Exec) -> Any:
        started.set()
        await asyncio.sleep(3600)
        return protocol.ExecResult(exit_code=0), b""

    first = restarts()
    first.daemon.core.backend.script(hang)
    outcomes: dict[str, Any] = {}
    with Client(first.target) as client:
        session = client.create_session()

        def stream() -> None:
            try:
                list(client.stream(session.id, "shell", {"command": "x"}, call_id="s"))
            except ToolrtRpcError as exc:
                outcomes["stream"] = exc.code

        def batch() -> None:
            calls = [pb.ToolCall(id="b", name="shell", arguments_json='{"command": "y"}')]
            try:
                client.stub.ExecuteBatch(pb.ExecuteBatchRequest(session_id=session.id, calls=calls))
            except grpc.RpcError as exc:
                outcomes["batch"] = exc.code()

        workers = [threading.Thread(target=stream), threading.Thread(target=batch)]
        for worker in workers:
            worker.start()
        started.wait(10)
        time.sleep(0.3)
        first.stop()
        for worker in workers:
            worker.join(10)
    assert outcomes == {
        "stream": grpc.StatusCode.UNAVAILABLE,
        "batch": grpc.StatusCode.UNAVAILABLE,
    }
