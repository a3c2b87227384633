"""The async client against the real engine: a streamed command and a
transfer each way through a sandbox."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import tarfile
from collections.abc import AsyncIterator

import pytest

from runtime.client.aio import AsyncClient, Result

pytestmark = pytest.mark.docker
MiB = 1 << 20


async def archive_in_chunks(name: str, data: bytes, chunk: int) -> AsyncIterator[bytes]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    archive = buffer.getvalue()
    for start in range(0, len(archive), chunk):
        yield archive[start : start + chunk]
        await asyncio.sleep(0)


def test_an_async_stream_and_transfers_through_a_sandbox(daemon):
    data = os.urandom(24 * MiB)

    async def main() -> None:
        async with AsyncClient(daemon.target) as c, c.session() as s:
            items = [
                item
                async for item in s.stream("shell", {"command": "for i in 1 2 3; do echo $i; done"})
            ]
            *output, result = items
            assert b"".join(chunk for kind, chunk in output if kind == "stdout") == b"1\n2\n3\n"
            assert isinstance(result, Result) and result.output["exit_code"] == 0

            sent = await s.upload(archive_in_chunks("blob", data, 3 * MiB + 7), "/workspace/in")
            assert sent == (1, len(data))
            digest = (await s.shell("sha256sum /workspace/in/blob")).output["stdout"]
            assert digest.split()[0] == hashlib.sha256(data).hexdigest()

            received = bytearray()
            async for chunk in s.download_chunks(["/workspace/in/blob"]):
                assert len(chunk) < len(data)
                received += chunk
            with tarfile.open(fileobj=io.BytesIO(bytes(received))) as tar:
                member = tar.extractfile("blob")
                assert member is not None and member.read() == data

    asyncio.run(main())


def test_an_async_exec_streams_binary_stdin_through_a_sandbox(session, daemon):
    data = os.urandom(16 * MiB)

    async def stdin() -> AsyncIterator[bytes]:
        for start in range(0, len(data), 5 * MiB):
            yield data[start : start + 5 * MiB]

    async def main() -> None:
        async with AsyncClient(daemon.target) as c:
            ended = await c.exec(session.id, ["sha256sum"], stdin=stdin())
            assert ended.exit_code == 0
            assert ended.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()
            with pytest.raises(PermissionError):
                await c.write_file_bytes(session.id, "/etc/passwd", b"root::0:0::/:/bin/sh\n")

    asyncio.run(main())
