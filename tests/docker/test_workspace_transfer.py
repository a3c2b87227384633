"""Workspaces in and out: CreateSession{workspace_tar}, UploadFiles, DownloadFiles, cp."""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import tarfile
import time

import docker
import grpc
import pytest

from runtime.cli import main as cli_main
from runtime.client import Client, ToolrtRpcError
from tests.helpers import make_tar, wait_for

pytestmark = pytest.mark.docker


def tree(session) -> str:
    result = session.shell("find /workspace /tmp -mindepth 1 -printf '%p %y %U\\n' | sort")
    assert result.ok, result
    return str(result.output["stdout"])


def test_create_session_seeds_the_workspace(client):
    seed = make_tar(
        ("src", "dir", None),
        ("src/app.py", "file", "print('hi')\n"),
        ("src/link.py", "symlink", "app.py"),
        ("src/copy.py", "hardlink", "src/app.py"),
        ("run.sh", "file", "#!/bin/sh\necho run\n"),
    )
    with client.session(workspace_tar=seed) as session:
        listing = tree(session)
        assert "/workspace/src/app.py f 1000" in listing
        assert "/workspace/src/link.py l 1000" in listing
        assert "/workspace/src/copy.py f 1000" in listing
        result = session.shell("python3 src/link.py && cat src/copy.py")
        assert result.output["stdout"] == "hi\nprint('hi')\n"
        assert ".toolrt-extract" not in session.shell("ls -a").output["stdout"]


def test_create_session_with_a_bad_archive_is_refused_and_leaves_nothing(client):
    with pytest.raises(ToolrtRpcError) as info:
        client.create_session(workspace_tar=make_tar(("../evil", "file", "x")))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "'..'" in info.value.details
    assert client.list_sessions() == []  # and the daemon fixture checks no container is left


def test_upload_into_a_directory_and_download_it_back(session):
    # Uncompressed, so the upload travels in several 1 MiB chunks.
    archive = make_tar(("a.txt", "file", "A"), ("sub/b.txt", "file", "B" * 3_000_000))
    assert session.upload(archive, "/workspace/proj") == (2, 3_000_001)
    assert session.shell("cat proj/a.txt").output["stdout"] == "A"
    # A second upload merges and replaces files; of a name given twice, the last wins.
    session.upload(make_tar(("a.txt", "file", "A1"), ("a.txt", "file", "A2")), "/workspace/proj")
    assert session.shell("cat proj/a.txt; (cd proj && ls)").output["stdout"] == "A2a.txt\nsub\n"
    data = session.download(["/workspace/proj"])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = sorted(tar.getnames())
        assert names == ["proj", "proj/a.txt", "proj/sub", "proj/sub/b.txt"]
        big = tar.extractfile("proj/sub/b.txt")
        assert big is not None and len(big.read()) == 3_000_000


def test_download_errors_are_statuses(session):
    with pytest.raises(ToolrtRpcError) as info:
        session.download(["/workspace/missing"])
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "no such file" in info.value.details
    for paths in (["relative"], ["/proc"], ["/etc/passwd"], []):
        with pytest.raises(ToolrtRpcError) as info:
            session.download(paths)
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    session.shell("ln -s /proc /workspace/proc-link")
    with pytest.raises(ToolrtRpcError) as info:
        session.download(["/workspace/proc-link/self"])
    assert "resolves to /proc/" in info.value.details
    with pytest.raises(ToolrtRpcError) as info:
        session.upload(make_tar(("a", "file", "a")), "/etc")
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("evil", "reason"),
    [
        (("/tmp/abs.txt", "file", "x"), "absolute path"),
        (("../up.txt", "file", "x"), "'..'"),
        (("a/../../up.txt", "file", "x"), "'..'"),
        (("root", "symlink", "/"), "absolute path"),
        (("passwd", "symlink", "/etc/passwd"), "absolute path"),
        (("deep/up", "symlink", "../../tmp"), "outside the root"),
        (("hard", "hardlink", "../etc/passwd"), "hard link"),
        (("null", "chr", None), "device"),
        (("pipe", "fifo", None), "device"),
        (("suid", "setuid", "#!/bin/sh\n"), "setuid"),
    ],
)
def test_archive_escapes_are_refused_and_nothing_is_extracted(session, evil, reason):
    before = tree(session)
    archive = make_tar(("good.txt", "file", "fine"), evil, ("later.txt", "file", "late"))
    with pytest.raises(ToolrtRpcError) as info:
        session.upload(archive)
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert reason in info.value.details
    assert tree(session) == before


def test_a_link_chain_through_another_link_is_refused(session):
    # Each link alone stays inside lexically; resolved for real, x leaves the root.
    before = tree(session)
    archive = make_tar(("y", "symlink", "."), ("x", "symlink", "y/.."), ("ok.txt", "file", "1"))
    with pytest.raises(ToolrtRpcError) as info:
        session.upload(archive, "/workspace/new/dest")
    assert "outside the root" in info.value.details
    assert tree(session) == before  # not even the destination directory


def test_writing_through_an_archive_link_is_refused(session):
    before = tree(session)
    archive = make_tar(("d", "symlink", "sub"), ("sub", "dir", None), ("d/f.txt", "file", "x"))
    with pytest.raises(ToolrtRpcError):
        session.upload(archive)
    assert tree(session) == before


def test_an_archive_larger_than_the_workspace_is_refused(client):
    with client.session(limits={"workspace_bytes": 1 << 20}) as session:
        before = tree(session)
        huge = make_tar(("small.txt", "file", "s"), ("zeros", "file", b"\0" * (3 << 20)), gz=True)
        with pytest.raises(ToolrtRpcError) as info:
            session.upload(huge)
        assert "bytes free" in info.value.details
        assert tree(session) == before


def test_not_a_tar_archive(session):
    with pytest.raises(ToolrtRpcError) as info:
        session.upload(b"this is not a tar archive" * 100)
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "tar" in info.value.details
    before = tree(session)
    cut = make_tar(("a.txt", "file", "a"), ("b.bin", "file", b"b" * 100_000))[:5000]
    with pytest.raises(ToolrtRpcError) as info:
        session.upload(cut)
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert tree(session) == before


def test_cp_round_trip(daemon, session, tmp_path, capsys):
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "mod.py").write_text("VALUE = 1\n")
    (project / "README").write_text("read me\n")
    (project / "pkg" / "link").symlink_to("mod.py")
    target = ["--target", daemon.target]
    assert cli_main(["cp", str(project), f"{session.id}:/workspace/proj", *target]) == 0
    assert cli_main(["cp", str(project / "README"), f"{session.id}:notes/", *target]) == 0
    listing = session.shell("find proj notes | sort").output["stdout"].split()
    assert listing == [
        "notes",
        "notes/README",
        "proj",
        "proj/README",
        "proj/pkg",
        "proj/pkg/link",
        "proj/pkg/mod.py",
    ]
    session.shell("echo 'VALUE = 2' > proj/pkg/mod.py")
    back = tmp_path / "back"
    assert cli_main(["cp", f"{session.id}:/workspace/proj", str(back), *target]) == 0
    assert (back / "pkg" / "mod.py").read_text() == "VALUE = 2\n"
    assert (back / "README").read_text() == "read me\n"
    assert (back / "pkg" / "link").is_symlink()
    single = tmp_path / "one.txt"
    assert cli_main(["cp", f"{session.id}:proj/README", str(single), *target]) == 0
    assert single.read_text() == "read me\n"
    assert cli_main(["cp", str(single), str(tmp_path / "x"), *target]) == 2
    capsys.readouterr()


def test_transfers_are_activity_for_the_idle_reaper(make_daemon):
    running = make_daemon(reaper_interval_s=0.2)
    with Client(running.target) as client, client.session(idle_seconds=2) as session:
        # Only transfers, for more than twice the idle limit: the session stays.
        until = time.monotonic() + 5
        while time.monotonic() < until:
            assert session.upload(make_tar(("a.txt", "file", "a"))) == (1, 1)
            time.sleep(0.5)
            assert session.download(["/workspace/a.txt"])
            time.sleep(0.5)
        assert client.get_session(session.id).state == "ready"
        # Left alone, it goes as usual.
        wait_for(lambda: not client.list_sessions())


@pytest.mark.parametrize(
    "transfer",
    [
        pytest.param(lambda s: s.upload(make_tar(("a.txt", "file", "a"))), id="upload"),
        pytest.param(lambda s: s.download(["/workspace"]), id="download"),
    ],
)
def test_a_transfer_to_a_lost_sandbox_closes_the_session(client, docker_client, transfer):
    session = client.session()
    container = docker_client.containers.get(f"toolrt-{session.id}")
    container.kill()
    # The daemon may notice first and remove the container itself.
    with contextlib.suppress(docker.errors.NotFound):
        container.wait(timeout=30)
    with pytest.raises(ToolrtRpcError) as info:
        transfer(session)
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "SANDBOX_LOST" in info.value.details
    closed = client.get_session(session.id)
    assert (closed.state, closed.closed_reason) == ("closed", "sandbox_lost")
    assert client.list_sessions() == []


def test_gzip_bzip2_and_xz_archives_are_unpacked(session):
    plain = make_tar(("d/a.txt", "file", "packed\n"))
    for name, compress in (("gz", gzip.compress), ("bz2", bz2.compress), ("xz", lzma.compress)):
        session.upload(compress(plain), f"/workspace/{name}")
        read = session.call("read_file", {"path": f"/workspace/{name}/d/a.txt"})
        assert read.ok and read.output["content"] == "packed\n", (name, read)
