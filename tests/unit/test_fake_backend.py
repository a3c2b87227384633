"""The fake backend through the real AgentClient: files, scripts, the error edge."""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import AsyncIterator

import pytest

from runtime.agent import protocol
from runtime.config import Limits
from runtime.errors import (
    CallTimeout,
    FileMissing,
    InternalFailure,
    InvalidArguments,
    LimitExceeded,
    PathDenied,
    SandboxLost,
)
from runtime.sandbox import agent_client
from runtime.sandbox.backend import ConnectedSandbox, SandboxSpec
from runtime.sandbox.fake import FakeBackend, Lose


async def sandbox_of(backend: FakeBackend, session_id: str = "s1") -> ConnectedSandbox:
    return await backend.create(SandboxSpec(session_id=session_id, image="-", limits=Limits()))


def test_files_round_trip():
    async def run() -> None:
        agent = (await sandbox_of(FakeBackend())).agent
        assert (await agent.write("/workspace/d/a.txt", b"1\n2\n3\n")).bytes_written == 6
        reply, window = await agent.read(
            protocol.Read(path="/workspace/d/a.txt", offset=2, limit=1)
        )
        assert (window, reply.total_lines, reply.truncated) == (b"2\n", 3, True)
        resolved = await agent.resolve(["/workspace/d/../d/a.txt", "/workspace/d", "/nope"])
        assert [(r.path, r.type) for r in resolved] == [
            ("/workspace/d/a.txt", "file"),
            ("/workspace/d", "dir"),
            ("/nope", ""),
        ]
        listing = await agent.list_dir("/workspace", recursive=True, max_entries=10)
        assert [(e.path, e.type, e.size) for e in listing.entries] == [
            ("/workspace/d", "dir", 0),
            ("/workspace/d/a.txt", "file", 6),
        ]
        chunks = [chunk async for chunk in agent.archive(["/workspace/d"], 1 << 20)]
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            assert sorted(tar.getnames()) == ["d", "d/a.txt"]

        async def upload() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

        extracted = await agent.extract("/tmp", upload())
        assert (extracted.files, extracted.bytes) == (1, 6)
        _, data = await agent.read(protocol.Read(path="/tmp/d/a.txt", raw=True))
        assert data == b"1\n2\n3\n"
        await agent.unlink("/tmp/d/a.txt")
        with pytest.raises(FileMissing, match="/tmp/d/a.txt: no such file"):
            await agent.read(protocol.Read(path="/tmp/d/a.txt"))

    asyncio.run(run())


def test_scripted_exec_and_agent_failures_cross_the_real_error_edge():
    backend = FakeBackend()
    answers = iter(
        [
            (protocol.ExecResult(exit_code=3), b"out", b"err"),
            protocol.Failure(code=protocol.PATH_DENIED, message="no"),
            protocol.Failure(code=protocol.LIMIT_EXCEEDED, message="pids"),
            protocol.Failure(code="SOMETHING_NEW", message="?"),
        ]
    )
    backend.script(lambda request: next(answers))

    async def run() -> None:
        agent = (await sandbox_of(backend)).agent
        result, body = await agent.exec(protocol.Exec(command="x", call_id="c1"))
        assert (result.exit_code, result.call_id, body) == (3, "c1", b"outerr")
        assert (result.stdout.head, result.stderr.head) == (3, 3)
        for expected in (PathDenied, LimitExceeded, InternalFailure):
            with pytest.raises(expected):
                await agent.exec(protocol.Exec(command="x"))
        assert [e.command for e in backend.execs()] == ["x"] * 4

    asyncio.run(run())


def test_streamed_output_reaches_the_caller():
    backend = FakeBackend()
    backend.script(lambda request: (protocol.ExecResult(exit_code=0), b"live"))
    seen: list[tuple[str, bytes]] = []

    async def run() -> None:
        agent = (await sandbox_of(backend)).agent
        request = protocol.Exec(command="x", stream=True)
        await agent.exec(request, on_output=lambda stream, chunk: seen.append((stream, chunk)))

    asyncio.run(run())
    assert seen == [("stdout", b"live")]


def test_a_lost_sandbox_fails_every_call_in_flight():
    backend = FakeBackend()

    async def answer(request: protocol.Exec) -> Lose | tuple[protocol.ExecResult, bytes]:
        if request.command == "die":
            await asyncio.sleep(0.05)
            return Lose("the container was killed")
        await asyncio.sleep(10)
        return protocol.ExecResult(exit_code=0), b""

    backend.script(answer)

    async def run() -> None:
        sandbox = await sandbox_of(backend)
        calls = [sandbox.agent.exec(protocol.Exec(command=c)) for c in ("sleep", "die")]
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert [type(r) for r in results] == [SandboxLost, SandboxLost]
        assert sandbox.lost == "the container was killed"
        with pytest.raises(SandboxLost):
            await sandbox.agent.ping()

    asyncio.run(run())


def test_a_cancelled_call_stops_its_script():
    backend = FakeBackend()
    finished: list[str] = []

    async def slow(request: protocol.Exec) -> tuple[protocol.ExecResult, bytes]:
        await asyncio.sleep(10)
        finished.append(request.command)
        return protocol.ExecResult(exit_code=0), b""

    backend.script(slow)

    async def run() -> None:
        sandbox = await sandbox_of(backend)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(sandbox.agent.exec(protocol.Exec(command="x")), 0.1)
        assert not sandbox.lost
        await sandbox.agent.ping()

    asyncio.run(run())
    assert finished == []


def test_an_agent_that_does_not_answer_in_time_is_a_timeout_and_told_to_stop(monkeypatch):
    monkeypatch.setattr(agent_client, "ANSWER_MARGIN_S", 0.0)
    backend = FakeBackend()
    started: list[str] = []
    finished: list[str] = []

    async def stuck(request: protocol.Exec) -> tuple[protocol.ExecResult, bytes]:
        started.append(request.command)
        await asyncio.sleep(10)
        finished.append(request.command)
        return protocol.ExecResult(exit_code=0), b""

    backend.script(stuck)

    async def run() -> None:
        sandbox = await sandbox_of(backend)
        request = protocol.Exec(command="x", timeout_s=0.2, grace_s=0.0)
        with pytest.raises(CallTimeout, match="did not answer 'exec' within 0.2 s"):
            await sandbox.agent.exec(request)
        await asyncio.sleep(0)  # the cancel reaches the script
        assert not sandbox.lost
        await sandbox.agent.ping()

    asyncio.run(run())
    assert (started, finished) == (["x"], [])


def test_extract_refuses_what_the_fake_cannot_hold():
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        link = tarfile.TarInfo("link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc"
        tar.addfile(link)

    async def upload() -> AsyncIterator[bytes]:
        yield buffer.getvalue()

    async def run() -> None:
        agent = (await sandbox_of(FakeBackend())).agent
        with pytest.raises(InvalidArguments, match="files and directories only"):
            await agent.extract("/workspace", upload())

    asyncio.run(run())


def test_a_backend_declares_what_it_cannot_do_by_not_overriding_it():
    from runtime.config import Limits
    from runtime.sandbox.backend import NO_USAGE, NotOffered, SandboxBackend

    class Minimal(SandboxBackend):
        async def create(self, spec):
            raise AssertionError

        async def destroy(self, sandbox_id: str) -> None:
            return None

        async def list_owned(self) -> list[str]:
            return []

        async def reap_owned(self) -> int:
            return 0

        async def close(self) -> None:
            return None

    async def asked() -> None:
        backend = Minimal()
        with pytest.raises(NotOffered, match="cannot re-attach"):
            await backend.adopt("s")
        with pytest.raises(NotOffered, match="cannot change limits"):
            await backend.update_limits("s", Limits())
        assert await backend.describe_engine() is None
        assert await backend.usage("s") == NO_USAGE

    asyncio.run(asked())
