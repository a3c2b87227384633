"""Uploads and downloads stream through the daemon with bounded memory.

An upload used to be gathered whole before its session was even looked up,
and a download queued whatever the agent produced, however slowly the
client read it. Both now travel in chunks under flow control (credits the
agent and the daemon grant each other), so the daemon's memory stays flat
whatever the archive's size or the client's speed.
"""

from __future__ import annotations

import asyncio
import gc
import tarfile
import threading
import time
from collections.abc import AsyncIterator, Iterator

import grpc
import psutil
import pytest

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.agent import protocol
from runtime.sandbox.agent_client import AgentClient
from runtime.sandbox.framing import AgentConnection
from tests.helpers import Pipe

MiB = 1 << 20
WINDOW = protocol.WINDOW_CHUNKS


# -- the daemon's side: a window of chunks, and no more ----------------------
def sent_frames(pipe: Pipe) -> list[protocol.Frame]:
    decoder = protocol.Decoder()
    return [frame for data in pipe.written for frame in decoder.feed(data)]


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def upload_under_flow_control() -> list[str]:
    pipe = Pipe()
    connection = AgentConnection("test", pipe, pipe, epoch=1)
    connection.start()
    taken: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        for index in range(10):
            taken.append(index)
            yield bytes([index]) * 100

    task = asyncio.ensure_future(AgentClient(connection).extract("/workspace", chunks()))
    await settle()
    [request, *data] = sent_frames(pipe)
    assert request.as_type(protocol.Extract).window == WINDOW
    # The agent has taken nothing in: the client stops at its window.
    assert [f.body[0] for f in data] == list(range(WINDOW)) and len(taken) <= WINDOW + 1
    credit = protocol.encode(protocol.Credit(chunks=3), request.request_id, 1)
    pipe.replies.put_nowait(credit)
    await settle()
    assert len(sent_frames(pipe)) == 1 + WINDOW + 3
    pipe.replies.put_nowait(protocol.encode(protocol.Credit(chunks=10), request.request_id, 1))
    await settle()
    *_, last = sent_frames(pipe)
    assert last.as_type(protocol.ArchiveChunk).end
    done = protocol.Transferred(files=1, bytes=1000)
    pipe.replies.put_nowait(protocol.encode(done, request.request_id, 1))
    assert await asyncio.wait_for(task, 5) == done
    connection.close()
    return [f.op for f in sent_frames(pipe)]


def test_an_upload_goes_out_a_window_ahead_of_the_agents_credits():
    ops = asyncio.run(upload_under_flow_control())
    assert ops == ["extract"] + ["data"] * 11


async def download_under_flow_control() -> None:
    pipe = Pipe()
    connection = AgentConnection("test", pipe, pipe, epoch=1)
    connection.start()
    chunks = AgentClient(connection).archive(["/workspace"], max_bytes=1 << 30)
    first = asyncio.ensure_future(chunks.__anext__())
    await settle()
    [request] = sent_frames(pipe)
    assert request.as_type(protocol.Archive).window == WINDOW
    for index in range(WINDOW):
        chunk = protocol.encode(protocol.ArchiveChunk(), request.request_id, 1, bytes([index]))
        pipe.replies.put_nowait(chunk)
    assert await asyncio.wait_for(first, 5) == b"\x00"
    await settle()
    # Taking the first chunk grants nothing yet: the caller has not asked again.
    assert [f.op for f in sent_frames(pipe)] == ["archive"]
    assert await chunks.__anext__() == b"\x01"
    assert [f.op for f in sent_frames(pipe)] == ["archive", "credit"]
    # An agent that sends more than its credits broke the protocol.
    for _ in range(WINDOW):
        chunk = protocol.encode(protocol.ArchiveChunk(), request.request_id, 1, b"x")
        pipe.replies.put_nowait(chunk)
    await settle()
    with pytest.raises(Exception, match="SANDBOX_LOST|broke protocol"):
        async for _ in chunks:
            pass
    connection.close()


def test_a_download_is_credited_one_chunk_at_a_time_as_the_caller_takes_them():
    asyncio.run(download_under_flow_control())


# -- through the daemon, with the real engine --------------------------------


class PeakRss:
    """How far this process's resident memory rose above where it started."""

    def __init__(self) -> None:
        self.process = psutil.Process()
        self.stop = threading.Event()
        self.base = self.peak = 0

    def __enter__(self) -> PeakRss:
        gc.collect()
        self.base = self.peak = self.process.memory_info().rss
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while not self.stop.wait(0.02):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    @property
    def growth(self) -> int:
        return self.peak - self.base


def upload_stream(session_id: str, parts: Iterator[bytes], sent: list[int]) -> Iterator:
    """UploadFilesRequests of `parts`, counting (in `sent`) those taken."""
    first = True
    for part in parts:
        sent[0] += 1
        if first:
            yield pb.UploadFilesRequest(session_id=session_id, path="/workspace", tar=part)
            first = False
        else:
            yield pb.UploadFilesRequest(tar=part)


def same_name_archive(copies: int, size: int, end: bool = True) -> Iterator[bytes]:
    """A tar of `copies` members all named same.bin (the last one wins), made as
    it is read: `copies * size` bytes on the wire, `size` on disk at a time."""
    block = bytes(range(256)) * (MiB // 256)
    for _ in range(copies):
        info = tarfile.TarInfo("same.bin")
        info.size = size
        yield info.tobuf(format=tarfile.USTAR_FORMAT)
        for _ in range(size // MiB):
            yield block
    if end:
        yield bytes(tarfile.RECORDSIZE)


@pytest.mark.docker
def test_an_upload_to_an_unknown_session_is_refused_at_its_first_message(client):
    results: list[grpc.RpcError | None] = [None] * 4
    sent = [[0] for _ in results]

    def upload(index: int) -> None:
        parts = (bytes(MiB) for _ in range(128))
        try:
            client.stub.UploadFiles(upload_stream("nope", parts, sent[index]), timeout=120)
        except grpc.RpcError as exc:
            results[index] = exc

    with PeakRss() as rss:
        threads = [threading.Thread(target=upload, args=(i,)) for i in range(len(results))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    for error in results:
        assert error is not None and error.code() == grpc.StatusCode.NOT_FOUND
    # Four uploads of 128 MiB each used to be gathered whole (twice over) first.
    assert rss.growth < 64 * MiB, f"the daemon grew by {rss.growth / MiB:.0f} MiB"
    assert all(count[0] < 64 for count in sent), sent


@pytest.mark.docker
def test_an_upload_without_a_session_id_first_is_refused_at_once(client):
    requests = [pb.UploadFilesRequest(tar=b"x"), pb.UploadFilesRequest(session_id="s")]
    with pytest.raises(grpc.RpcError) as info:
        client.stub.UploadFiles(iter(requests), timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "first message" in (info.value.details() or "")


@pytest.mark.docker
def test_a_large_upload_streams_through_with_flat_memory(client):
    with client.session() as session:
        sent = [0]
        parts = same_name_archive(copies=64, size=2 * MiB)
        with PeakRss() as rss:
            reply = client.stub.UploadFiles(upload_stream(session.id, parts, sent), timeout=300)
        assert (reply.files, reply.bytes) == (64, 128 * MiB)
        # 128 MiB passed through; the daemon held a few chunks of it at a time.
        assert rss.growth < 48 * MiB, f"the daemon grew by {rss.growth / MiB:.0f} MiB"
        listing = session.shell(
            "ls -A; find same.bin -printf '%s\\n'; od -An -tu1 -j 258 -N 2 same.bin"
        )
        assert listing.output["stdout"].split() == ["same.bin", str(2 * MiB), "2", "3"]


@pytest.mark.docker
def test_a_streamed_upload_that_breaks_midway_changes_nothing(client):
    with client.session() as session:

        def parts() -> Iterator[bytes]:
            yield from same_name_archive(copies=1, size=2 * MiB, end=False)
            info = tarfile.TarInfo("../escape")
            info.size = 1
            yield info.tobuf(format=tarfile.USTAR_FORMAT) + bytes(512)
            yield bytes(tarfile.RECORDSIZE)

        with pytest.raises(grpc.RpcError) as info:
            client.stub.UploadFiles(upload_stream(session.id, parts(), [0]), timeout=60)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "'..'" in (info.value.details() or "")
        assert session.shell("cd /workspace && ls -A").output["stdout"] == ""


@pytest.mark.docker
def test_slow_downloads_of_a_huge_sparse_file_keep_the_daemon_flat(client):
    with client.session() as session:
        made = session.shell("head -c 4096 /dev/urandom > big && truncate -s 64G big")
        assert made.ok and made.output["exit_code"] == 0, made
        request = pb.DownloadFilesRequest(session_id=session.id, paths=["/workspace/big"])
        streams = [client.stub.DownloadFiles(request, timeout=120) for _ in range(2)]
        try:
            with PeakRss() as rss:
                # A slow reader: one chunk now and then.
                for _ in range(4):
                    for stream in streams:
                        assert next(stream).tar
                    time.sleep(1)
            # Each would otherwise have queued up to twice the workspace size.
            assert rss.growth < 64 * MiB, f"the daemon grew by {rss.growth / MiB:.0f} MiB"
        finally:
            for stream in streams:
                stream.cancel()
        # The archive threads stop with their streams; the session carries on.
        assert session.shell("echo fine").output["stdout"] == "fine\n"
