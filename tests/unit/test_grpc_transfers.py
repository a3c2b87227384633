"""Workspaces in and out through gRPC without an engine: seed, upload, download."""

from __future__ import annotations

import io
import tarfile

import grpc
import pytest

from runtime.client import ToolrtRpcError
from tests.helpers import make_tar


@pytest.fixture(params=["local", "local-static", "fake"])
def sandbox_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def members(archive: bytes) -> dict[str, bytes | None]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {
            m.name: (f.read() if (f := tar.extractfile(m)) is not None else None)
            for m in tar.getmembers()
        }


def test_upload_then_download_round_trip(session):
    # Uncompressed, so the upload travels in several 1 MiB chunks.
    big = b"B" * 3_000_000
    archive = make_tar(("a.txt", "file", "A"), ("sub", "dir", None), ("sub/b.bin", "file", big))
    assert session.upload(archive, "/workspace/proj") == (2, 3_000_001)
    assert session.call("read_file", {"path": "proj/a.txt"}).output["content"] == "A"
    got = members(session.download(["/workspace/proj"]))
    assert sorted(got) == ["proj", "proj/a.txt", "proj/sub", "proj/sub/b.bin"]
    assert got["proj/a.txt"] == b"A" and got["proj/sub/b.bin"] == big


def test_create_session_seeds_the_workspace(client):
    seed = make_tar(("src", "dir", None), ("src/app.py", "file", "print('hi')\n"))
    with client.session(workspace_tar=seed) as session:
        listing = session.call("list_files", {"recursive": True}).output["entries"]
        assert [(e["path"], e["type"]) for e in listing] == [
            ("/workspace/src", "dir"),
            ("/workspace/src/app.py", "file"),
        ]


def test_download_errors_are_statuses(session):
    for paths in (["/workspace/missing"], ["relative"], ["/etc/passwd"], []):
        with pytest.raises(ToolrtRpcError) as info:
            session.download(paths)
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT, paths
    with pytest.raises(ToolrtRpcError) as info:
        session.upload(make_tar(("a", "file", "a")), "/etc")
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
