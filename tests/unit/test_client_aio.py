"""The async client (runtime.client.aio) against a real in-process daemon:
every method on the local backend (the real agent), credentials on the
secured daemon, and a cancelled task cancelling its RPC on the fake backend."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, TypeVar

import grpc
import pytest

from runtime.agent import protocol
from runtime.client import TLS, Client, ToolrtRpcError
from runtime.client.aio import AsyncClient, AsyncSession
from tests import provider_types as sdk
from tests.conftest import RunningDaemon
from tests.unit.secured import Secured

T = TypeVar("T")


@pytest.fixture
def sandbox_backend() -> str:
    return "local"


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


def in_session(daemon: RunningDaemon, body: Callable[[AsyncSession], Awaitable[T]]) -> T:
    async def main() -> T:
        async with AsyncClient(daemon.target) as c, c.session() as s:
            return await body(s)

    return asyncio.run(main())


def tar_of(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def files_in(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_calls_batches_messages_and_streams(daemon):
    async def body(s: AsyncSession) -> None:
        result = await s.call("shell", {"command": "echo hi"}, call_id="c1")
        assert (result.ok, result.call_id, result.output["stdout"]) == (True, "c1", "hi\n")
        first, second = await s.batch([("shell", {"command": "echo a"}), ("shell", "{}")])
        assert first.output["stdout"] == "a\n" and second.error_code == "INVALID_ARGUMENTS"
        message = sdk.openai_message(("call_1", "shell", json.dumps({"command": "echo m"})))
        rendered, results = await s.execute_message("openai", message.model_dump())
        assert rendered[0]["tool_call_id"] == "call_1" and results[0].output["stdout"] == "m\n"
        items = [i async for i in s.stream("shell", {"command": "echo out; echo err >&2"})]
        *output, last = items
        assert sorted(output) == [("stderr", b"err\n"), ("stdout", b"out\n")]
        assert last.ok and last.output["exit_code"] == 0

    in_session(daemon, body)


def test_sessions_and_tools(daemon):
    async def main() -> None:
        async with AsyncClient(daemon.target) as c:
            session = await c.session(labels={"who": "aio"})
            assert (await c.get_session(session.id)).labels["who"] == "aio"
            assert session.id in [s.id for s in await c.list_sessions()]
            names = {t["name"] for t in await c.list_tools()}
            assert {"shell", "read_file"} <= names
            openai = await c.list_tools("openai", session.id)
            assert {t["function"]["name"] for t in openai} == names
            async with session:
                pass
            assert session.id not in [s.id for s in await c.list_sessions()]
            other = await c.session()
            assert await c.close_session(other.id) == "closed"

    run(main())


async def pieces(*chunks: bytes) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


def test_uploads_from_any_byte_source_and_downloads_in_chunks(daemon):
    big = bytes(range(256)) * (12 << 12)  # 12 MiB: more than one chunk each way
    archive = tar_of({"big.bin": big})

    async def body(s: AsyncSession) -> None:
        assert await s.upload(tar_of({"a.txt": b"one"})) == (1, 3)
        halves = [archive[: len(archive) // 2], archive[len(archive) // 2 :]]
        assert await s.upload(iter(halves), "/workspace/sync") == (1, len(big))
        assert await s.upload(pieces(*halves), "/workspace/async") == (1, len(big))
        sizes = [len(c) async for c in s.download_chunks(["/workspace/async/big.bin"])]
        assert len(sizes) > 1 and max(sizes) < len(big)
        whole = await s.download(["/workspace/a.txt", "/workspace/sync/big.bin"])
        assert files_in(whole) == {"a.txt": b"one", "big.bin": big}

    in_session(daemon, body)


def test_snapshots_forks_and_restores(daemon):
    async def body(s: AsyncSession) -> None:
        c = s.client
        await s.shell("echo kept > f")
        snap = await s.snapshot("aio")
        assert snap.id in [x.id for x in await c.list_snapshots()]
        await s.shell("echo changed > f")
        assert await s.restore(snap.id) == []
        assert (await s.shell("cat f")).output["stdout"] == "kept\n"
        (child,) = await s.fork()
        async with child:
            assert (await child.shell("cat f")).output["stdout"] == "kept\n"
        forked = await c.fork(snap.id, count=2)
        for other in forked:
            async with other:
                assert (await other.shell("cat f")).output["stdout"] == "kept\n"
        await c.delete_snapshot(snap.id)
        assert snap.id not in [x.id for x in await c.list_snapshots()]

    in_session(daemon, body)


def test_errors_are_the_sync_clients(daemon):
    """The same code and details from both clients, and the daemon keeps serving."""
    with Client(daemon.target) as sync:
        with pytest.raises(ToolrtRpcError) as expected:
            sync.get_session("nope")

    async def main() -> None:
        async with AsyncClient(daemon.target) as c:
            with pytest.raises(ToolrtRpcError) as raised:
                await c.get_session("nope")
            assert (raised.value.code, raised.value.details) == (
                expected.value.code,
                expected.value.details,
            )
            with pytest.raises(ToolrtRpcError) as raised:
                await c.upload("nope", b"")
            assert raised.value.code == grpc.StatusCode.NOT_FOUND
            with pytest.raises(ToolrtRpcError) as raised:
                [x async for x in c.stream("nope", "shell", {"command": "true"})]
            assert raised.value.code == grpc.StatusCode.NOT_FOUND
            with pytest.raises(ToolrtRpcError) as raised:
                await c.download("nope", ["/workspace"])
            assert raised.value.code == grpc.StatusCode.NOT_FOUND
            async with c.session() as s:
                with pytest.raises(ToolrtRpcError) as raised:
                    await s.download(["/etc"])
                assert raised.value.code == grpc.StatusCode.INVALID_ARGUMENT
                assert (await s.shell("true")).ok

    run(main())


def waiting_script() -> tuple[Any, list[str]]:
    """A fake exec that runs until cancelled, and what became of it."""
    seen: list[str] = []

    async def script(request: protocol.Exec) -> tuple[protocol.ExecResult, bytes]:
        seen.append("started")
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return protocol.ExecResult(exit_code=0), b""

    return script, seen


async def until(seen: list[str], what: str) -> None:
    while what not in seen:
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("how", ["call", "stream", "deadline"])
def test_a_cancelled_task_cancels_its_call(make_daemon, how):
    """Cancelling the task (or the call's deadline passing) stops the call in the daemon."""
    daemon = make_daemon(backend="fake")
    script, seen = waiting_script()
    daemon.daemon.core.backend.script(script)

    async def consume(s: AsyncSession) -> None:
        if how == "call":
            await s.shell("sleep 3600")
        else:
            async with aclosing(s.stream("shell", {"command": "sleep 3600"})) as items:
                async for _ in items:
                    pass

    async def body(s: AsyncSession) -> None:
        if how == "deadline":
            with pytest.raises(ToolrtRpcError) as raised:
                await s.client.call(s.id, "shell", {"command": "sleep 3600"}, timeout=5)
            assert raised.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            await asyncio.wait_for(until(seen, "cancelled"), 60)
            return
        task = asyncio.create_task(consume(s))
        await asyncio.wait_for(until(seen, "started"), 60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(until(seen, "cancelled"), 60)

    in_session(daemon, body)
    assert seen == ["started", "cancelled"]


def test_tls_token_and_admin_calls(secured: Secured):
    target, ca = secured.daemon.target, secured.pki.cert_file

    async def main() -> None:
        async with AsyncClient(target, token=secured.tokens["ops"], tls=TLS(ca_file=ca)) as ops:
            stats = await ops.admin_stats()
            assert stats.instance == secured.daemon.instance
            async with AsyncClient(target, token=secured.tokens["alice"], tls=TLS(ca)) as alice:
                async with alice.session() as s:
                    assert (await s.shell("true")).ok
                    listed = await ops.admin_sessions(tenant="alice")
                    assert [x.session.id for x in listed] == [s.id]
                with pytest.raises(ToolrtRpcError) as raised:
                    await alice.admin_stats()
                assert raised.value.code == grpc.StatusCode.PERMISSION_DENIED
        async with AsyncClient(target, token="wrong", tls=TLS(ca_file=ca)) as stranger:
            with pytest.raises(ToolrtRpcError) as raised:
                await stranger.list_sessions()
            assert raised.value.code == grpc.StatusCode.UNAUTHENTICATED

    run(main())


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_both_clients_read_target_token_and_tls_from_the_environment(
    secured: Secured, monkeypatch, kind
):
    monkeypatch.setenv("TOOLRT_TARGET", secured.daemon.target)
    monkeypatch.setenv("TOOLRT_TOKEN", secured.tokens["alice"])
    monkeypatch.setenv("TOOLRT_TLS_CA", secured.pki.cert_file)
    if kind == "sync":
        with Client() as c:
            assert c.list_sessions() == []
        return

    async def main() -> None:
        async with AsyncClient() as c:
            assert await c.list_sessions() == []

    run(main())


def test_mutual_tls(secure_daemon, pki):
    secured = secure_daemon(auth={"tls_client_ca_file": pki.cert_file})
    carol = pki.client("carol", "Carol Smith", "toolrt://tenant/carol")
    tls = TLS(ca_file=pki.cert_file, cert_file=carol.cert_file, key_file=carol.key_file)

    async def main() -> None:
        async with AsyncClient(secured.daemon.target, token="", tls=tls) as c:
            async with c.session() as s:
                assert (await c.get_session(s.id)).tenant == "carol"

    run(main())


def test_a_unix_socket(make_daemon, tmp_path):
    path = tmp_path / "toolrt.sock"
    daemon = make_daemon(backend="fake", unix_socket=str(path))

    async def main() -> None:
        async with AsyncClient(f"unix:{path}") as c, c.session() as s:
            assert (await s.shell("true")).ok
        assert daemon.daemon.core is not None

    run(main())


# -- programs: exec and files ---------------------------------------------------


def test_exec_with_stdin_from_any_source(daemon):
    data = bytes(range(256)) * 4096 + b"\xc3\x28\x00\xff"  # 1 MiB and change, not UTF-8

    async def body(s: AsyncSession) -> None:
        whole = await s.exec(["sha256sum"], stdin=data)
        assert whole.exit_code == 0 and whole.pid > 0
        digest = whole.stdout.split()[0]
        halves = [data[:1000], data[1000:]]
        assert (await s.exec(["sha256sum"], stdin=iter(halves))).stdout.split()[0] == digest
        assert (await s.exec(["sha256sum"], stdin=pieces(*halves))).stdout.split()[0] == digest
        ended = await s.exec(command="echo out; echo err >&2; exit 3")
        assert (ended.exit_code, ended.stdout, ended.stderr) == (3, b"out\n", b"err\n")

    in_session(daemon, body)


def test_an_exec_stream_takes_stdin_and_signals(daemon):
    async def body(s: AsyncSession) -> None:
        async with s.exec_stream(["cat"]) as cat:
            await cat.write(b"hello\n")
            await cat.close_stdin()
            events = [e async for e in cat.events()]
        assert [k for k, _ in events] == ["started", "stdout", "exit"]
        assert events[1][1] == b"hello\n" and events[2][1].exit_code == 0
        async with s.exec_stream(["sleep", "3600"]) as sleeper:
            async for kind, value in sleeper.events():
                if kind == "started":
                    await sleeper.signal("TERM")
                elif kind == "exit":
                    assert (value.exit_code, value.signal) == (143, "TERM")

    in_session(daemon, body)


@pytest.mark.parametrize("how", ["stream", "exec"])
def test_a_cancelled_exec_kills_its_program(daemon, how):
    async def body(s: AsyncSession) -> None:
        pid = asyncio.get_running_loop().create_future()
        if how == "stream":

            async def run() -> None:
                async for kind, value in s.exec_stream(["sleep", "3600"]).events():
                    if kind == "started":
                        pid.set_result(value.pid)

        else:

            async def run() -> None:
                await s.exec(command="echo $$ > /tmp/pid; exec sleep 3600")

            async def pid_file() -> None:
                wait = "while [ ! -s /tmp/pid ]; do sleep 0.05; done; cat /tmp/pid"
                pid.set_result(int((await s.exec(command=wait)).stdout))

            asyncio.create_task(pid_file())
        task = asyncio.create_task(run())
        await asyncio.wait_for(pid, 60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        alive = f"while kill -0 {pid.result()} 2>/dev/null; do sleep 0.05; done; echo gone"
        assert (await s.exec(command=alive, timeout=60)).stdout == b"gone\n"

    in_session(daemon, body)


def test_leaving_an_exec_stream_early_kills_its_program(daemon):
    async def body(s: AsyncSession) -> None:
        program = s.exec_stream(["sleep", "3600"])
        async with aclosing(program.events()) as events:
            async for kind, value in events:
                assert kind == "started"
                pid = value.pid
                break
        alive = f"while kill -0 {pid} 2>/dev/null; do sleep 0.05; done; echo gone"
        assert (await s.exec(command=alive, timeout=60)).stdout == b"gone\n"
        del program

    in_session(daemon, body)


def test_files_and_their_typed_errors(daemon):
    async def body(s: AsyncSession) -> None:
        assert (
            await s.write_file_bytes("/tmp/a/b.bin", pieces(b"\x00\xff", b"!"), make_parents=True)
            == 3
        )
        assert await s.read_file_bytes("/tmp/a/b.bin") == b"\x00\xff!"
        assert [c async for c in s.read_file_chunks("/tmp/a/b.bin", offset=1)] == [b"\xff!"]
        info = await s.stat("/tmp/a/b.bin")
        assert info.exists and info.size == 3
        with pytest.raises(FileNotFoundError) as missing:
            await s.read_file_bytes("/tmp/nope")
        assert (
            isinstance(missing.value, ToolrtRpcError) and missing.value.reason == "FILE_NOT_FOUND"
        )
        with pytest.raises(IsADirectoryError):
            await s.read_file_bytes("/tmp/a")
        await s.exec(command="echo ro > /tmp/ro && chmod 444 /tmp/ro")
        with pytest.raises(PermissionError):
            await s.write_file_bytes("/tmp/ro", b"changed")
        with pytest.raises(FileExistsError):
            await s.write_file_bytes("/tmp/a/b.bin", b"x", if_exists="fail")
        with pytest.raises(FileNotFoundError):
            await s.exec(["/no/such/program"])

    in_session(daemon, body)
