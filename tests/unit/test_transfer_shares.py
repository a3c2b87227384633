"""Transfer slots: a tenant that opens uploads and stalls holds only its share."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import grpc
import pytest

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.config import SharesConfig
from runtime.errors import ShareExhausted
from runtime.sessions.slots import TransferSlots
from tests.helpers import make_tar
from tests.unit.secured import status_of

SHARES = {"transfers": 3, "transfers_per_tenant": 2, "transfer_idle_s": 1.0}


def refusals(secured, share: str) -> float:
    metrics = secured.daemon.daemon.core.obs.metrics
    return metrics.totals(metrics.share_refusals, "share").get(share, 0.0)


def test_a_stalled_tenant_holds_its_share_and_the_others_transfer(secure_daemon):
    secured = secure_daemon(shares=SHARES)
    alice, bob = secured.client("alice"), secured.client("bob")
    hers, his = alice.create_session(), bob.create_session()
    resume = threading.Event()

    def stalled() -> Iterator[pb.UploadFilesRequest]:
        # One small chunk, then nothing until the test ends.
        yield pb.UploadFilesRequest(session_id=hers.id, path="/workspace", tar=b"\0" * 512)
        resume.wait(60)

    try:
        streams = [
            alice.stub.UploadFiles.future(stalled(), metadata=alice.metadata, timeout=60)
            for _ in range(3)
        ]
        # Bob's transfers are served beside alice's stalled ones.
        archive = make_tar(("b.txt", "file", "bob"))
        assert bob.upload(his.id, archive) == (1, 3)
        assert b"bob" in bob.download(his.id, ["/workspace/b.txt"])
        ended = []
        for stream in streams:
            with pytest.raises(grpc.RpcError) as info:
                stream.result(60)
            ended.append((info.value.code(), info.value.details()))
    finally:
        resume.set()
    # One of her three was refused at once, the two others lost their slots.
    assert all(code == grpc.StatusCode.RESOURCE_EXHAUSTED for code, _ in ended), ended
    keys = sorted(details.split("(shares.")[1].split(")")[0] for _, details in ended)
    assert keys == ["transfer_idle_s", "transfer_idle_s", "transfers_per_tenant"], ended
    assert refusals(secured, "transfers_per_tenant") == 1
    assert refusals(secured, "transfer_idle_s") == 2
    # Her slots are hers again.
    assert alice.upload(hers.id, make_tar(("a.txt", "file", "a"))) == (1, 1)
    assert status_of(lambda: alice.download(hers.id, ["/workspace/a.txt"])) is None


def test_a_download_whose_client_takes_nothing_loses_its_slot():
    refused: list[str] = []

    async def main() -> None:
        slots = TransferSlots(SharesConfig(transfer_idle_s=0.05), refused.append)

        async def archive() -> Iterator[bytes]:  # type: ignore[misc]
            for _ in range(3):
                yield b"chunk"

        async with slots.slot("alice") as slot:
            paced = slots.paced_out(slot, archive())
            assert await anext(paced) == b"chunk"
            await asyncio.sleep(0.5)  # the client takes nothing meanwhile
            assert slot.lost and slots.taken("alice") == 1
            with pytest.raises(ShareExhausted, match=r"took nothing .*shares.transfer_idle_s"):
                await anext(paced)
        assert slots.taken("alice") == 0

    asyncio.run(main())
    assert refused == ["transfer_idle_s"]
