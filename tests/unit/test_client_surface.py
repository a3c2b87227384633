"""The synchronous and the async client offer the same methods, and the
synchronous one's batches, chunked uploads and downloads work."""

from __future__ import annotations

import io
import tarfile

import pytest

from runtime.client import Client, SessionHandle
from runtime.client.aio import AsyncClient, AsyncSession


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_both_clients_have_the_same_methods():
    assert public(Client) == public(AsyncClient)
    assert public(SessionHandle) == public(AsyncSession)


@pytest.fixture
def sandbox_backend() -> str:
    return "local"


def test_the_sync_client_batches_and_moves_archives_in_chunks(session):
    first, second = session.batch([("shell", {"command": "echo a"}), ("shell", "{}")])
    assert first.output["stdout"] == "a\n" and second.error_code == "INVALID_ARGUMENTS"
    items = list(session.stream("shell", {"command": "echo s"}))
    assert items[0] == ("stdout", b"s\n") and items[-1].ok
    data = bytes(range(256)) * (12 << 12)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("big.bin")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    archive = buffer.getvalue()
    halves = iter([archive[:1000], archive[1000:]])
    assert session.upload(halves) == (1, len(data))
    chunks = list(session.download_chunks(["/workspace/big.bin"]))
    assert len(chunks) > 1
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
        member = tar.extractfile("big.bin")
        assert member is not None and member.read() == data
