"""One expensive operation must not stall the session's agent (issue: a stalled agent).

Reading a huge sparse file or unpacking a decompression bomb used to run on
the agent's only thread: no other call of the session was served and no
deadline was kept until it ended.
"""

from __future__ import annotations

import gzip
import tarfile
import threading
import time

import grpc
import pytest

from runtime.client import ToolrtRpcError

pytestmark = pytest.mark.docker


def in_background(fn, *args, **kwargs) -> tuple[threading.Thread, dict]:
    box: dict = {}

    def run() -> None:
        started = time.monotonic()
        try:
            box["result"] = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            box["error"] = exc
        box["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def test_a_huge_sparse_file_neither_freezes_the_session_nor_outlives_its_deadline(client):
    with client.session(limits={"call_timeout_s": 4}) as session:
        # Text at the start (so it is not taken for binary), then 1 TiB of
        # hole (holes read at memory speed: 64 GiB took 3 s, within the limit).
        made = session.shell("yes a line | head -c 16384 > big && truncate -s 1T big")
        assert made.ok and made.output["exit_code"] == 0, made
        reader, box = in_background(session.call, "read_file", {"path": "/workspace/big"})
        time.sleep(0.5)
        started = time.monotonic()
        quick = session.shell("echo still here")
        assert quick.output["stdout"] == "still here\n"
        timed = session.shell("sleep 60", timeout_s=2)
        assert timed.error_code == "TIMEOUT"
        assert time.monotonic() - started < 6, "the session was held by the read"
        reader.join(30)
        result = box["result"]
        assert result.error_code == "TIMEOUT", result
        assert "reading the file" in result.error_message
        assert box["seconds"] < 4 + 3


def gzip_bomb(members: int, size: int) -> bytes:
    """A tar.gz of `members` files of `size` zero bytes each, built from one
    compressed run of zeros (gzip members concatenate), so it stays small."""
    zeros = gzip.compress(bytes(size), compresslevel=9)
    parts = []
    for index in range(members):
        info = tarfile.TarInfo(f"zero{index}")
        info.size = size
        parts.append(gzip.compress(info.tobuf(format=tarfile.USTAR_FORMAT)) + zeros)
    parts.append(gzip.compress(bytes(1024)))  # the end-of-archive blocks
    return b"".join(parts)


def test_a_decompression_bomb_is_refused_early_and_the_session_keeps_answering(client):
    bomb = gzip_bomb(members=24, size=64 << 20)  # 1.5 GiB inflated
    assert len(bomb) < 2 << 20
    with client.session(limits={"workspace_bytes": 256 << 20}) as session:
        uploading, box = in_background(session.upload, bomb)
        time.sleep(0.3)
        started = time.monotonic()
        assert session.shell("echo alive").output["stdout"] == "alive\n"
        assert time.monotonic() - started < 8  # not held until the upload ends
        uploading.join(60)
        error = box["error"]
        assert isinstance(error, ToolrtRpcError), box
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "LIMIT_EXCEEDED" in error.details and "bytes free" in error.details
        assert box["seconds"] < 15
        assert session.shell("cd /workspace && ls -A").output["stdout"] == ""
