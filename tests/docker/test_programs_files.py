"""Files for programs against the real engine: any path with the sandbox
user's permissions, every refusal with its reason, writes that keep what
a file is, reads that are never cut."""

from __future__ import annotations

import hashlib
import json
import os

import grpc
import pytest

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import (
    Client,
    RemoteFileExistsError,
    RemoteFileNotFoundError,
    RemoteIsADirectoryError,
    RemoteNotADirectoryError,
    RemotePermissionError,
    ToolrtRpcError,
)
from tests.helpers import under_gvisor, wait_for

pytestmark = pytest.mark.docker


def test_bytes_round_trip_anywhere_the_user_may_write(session):
    data = os.urandom(3 << 20) + b"\x00\xff\xc3\x28"
    assert session.write_file_bytes("/tmp/deep/er/blob", data, make_parents=True) == len(data)
    assert session.read_file_bytes("/tmp/deep/er/blob") == data
    assert session.read_file_bytes("/tmp/deep/er/blob", offset=len(data) - 4) == b"\x00\xff\xc3\x28"
    # Relative paths are under /workspace; files outside the allowlist are readable.
    session.write_file_bytes("rel.txt", b"hi")
    assert session.read_file_bytes("/workspace/rel.txt") == b"hi"
    assert b"root:" in session.read_file_bytes("/etc/passwd")


def test_stat_says_what_is_there(session):
    session.write_file_bytes("f", b"12345", mode=0o640)
    session.exec(["ln", "-s", "f", "/workspace/link"])
    info = session.stat("f")
    assert (info.exists, info.type, info.size, info.mode) == (True, "file", 5, 0o640)
    assert info.mtime > 0
    link = session.stat("/workspace/link")
    assert (link.type, link.link_target) == ("symlink", "f")
    assert session.stat("/etc").type == "directory"
    assert session.stat("/dev/null").type == "other"
    assert not session.stat("/nope").exists
    assert not session.stat("/etc/passwd/x").exists


def test_every_file_error_has_its_reason(session):
    with pytest.raises(RemoteFileNotFoundError) as missing:
        session.read_file_bytes("/workspace/missing")
    assert (missing.value.code, missing.value.reason) == (
        grpc.StatusCode.NOT_FOUND,
        "FILE_NOT_FOUND",
    )
    with pytest.raises(RemoteIsADirectoryError) as directory:
        session.read_file_bytes("/etc")
    assert directory.value.code == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(RemoteIsADirectoryError):
        session.write_file_bytes("/workspace", b"x")
    with pytest.raises(RemoteNotADirectoryError):
        session.read_file_bytes("/etc/passwd/x")
    with pytest.raises(RemoteNotADirectoryError):
        session.write_file_bytes("/etc/passwd/x", b"x", make_parents=True)
    with pytest.raises(RemoteFileNotFoundError):
        session.write_file_bytes("/workspace/no/parent", b"x")
    with pytest.raises(RemotePermissionError) as denied:
        session.read_file_bytes("/etc/shadow")
    assert denied.value.reason == "PERMISSION_DENIED"
    with pytest.raises(RemotePermissionError):
        session.write_file_bytes("/etc/new-file", b"x")  # a read-only root filesystem
    session.write_file_bytes("once", b"1")
    with pytest.raises(RemoteFileExistsError) as exists:
        session.write_file_bytes("once", b"2", if_exists="fail")
    assert exists.value.code == grpc.StatusCode.ALREADY_EXISTS
    with pytest.raises(ToolrtRpcError) as large:
        session.read_file_bytes("/etc/passwd", max_bytes=10)
    assert (large.value.code, large.value.reason) == (
        grpc.StatusCode.OUT_OF_RANGE,
        "FILE_TOO_LARGE",
    )
    with pytest.raises(ToolrtRpcError) as no_space:
        session.write_file_bytes("/tmp/huge", (b"\0" * (1 << 20) for _ in range(2048)))
    assert no_space.value.reason == "NO_SPACE"
    with pytest.raises(ToolrtRpcError) as invalid:
        session.write_file_bytes("x", b"", if_exists="sometimes")
    assert (invalid.value.code, invalid.value.reason) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_REQUEST",
    )
    with pytest.raises(RemotePermissionError) as user:
        session.stat("/", user="root")
    assert user.value.reason == "USER_NOT_ALLOWED"


def test_a_read_only_file_refuses_write_file_and_keeps_what_it_is(session):
    session.write_file_bytes("ro", b"original", mode=0o444)
    with pytest.raises(RemotePermissionError):
        session.write_file_bytes("ro", b"changed")
    with pytest.raises(RemotePermissionError):
        session.write_file_bytes("ro", b"more", if_exists="append")
    assert session.read_file_bytes("ro") == b"original"
    # A writable one keeps its inode and mode when replaced or appended to.
    session.write_file_bytes("rw", b"one", mode=0o600)
    before = session.exec(["stat", "-c", "%i %a %U", "/workspace/rw"]).stdout
    session.write_file_bytes("rw", b"two")
    session.write_file_bytes("rw", b"+three", if_exists="append")
    assert session.read_file_bytes("rw") == b"two+three"
    if not under_gvisor():  # Debian's runsc refuses stat's statx flags
        assert session.exec(["stat", "-c", "%i %a %U", "/workspace/rw"]).stdout == before


def test_special_files_are_read_up_to_the_cap(session):
    with pytest.raises(ToolrtRpcError) as endless:
        session.read_file_bytes("/dev/zero", max_bytes=1 << 20)
    assert endless.value.reason == "FILE_TOO_LARGE"
    assert b"Name:" in session.read_file_bytes("/proc/self/status")


@pytest.mark.runc_only("gVisor cannot select on a FIFO (EPERM): a read may come before its writer")
def test_a_fifo_is_read_from_its_writer(session):
    session.exec(["mkfifo", "/tmp/fifo"])
    with session.exec_stream(command="echo through > /tmp/fifo", stdin_open=False) as writer:
        events = writer.events()
        assert next(events)[0] == "started"
        assert session.read_file_bytes("/tmp/fifo") == b"through\n"
        assert next(events)[0] == "exit"


def test_each_program_rpc_spends_a_call(make_daemon):
    daemon = make_daemon()
    with Client(daemon.target) as client, client.session(limits={"max_calls": 3}) as session:
        session.stat("/")
        session.read_file_bytes("/etc/hostname")
        session.exec(["true"])
        with pytest.raises(ToolrtRpcError) as spent:
            session.write_file_bytes("x", b"x")
        assert (spent.value.code, spent.value.reason) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "QUOTA_EXCEEDED",
        )


def test_each_program_rpc_is_audited(make_daemon, tmp_path):
    audit = tmp_path / "audit.jsonl"
    daemon = make_daemon(audit_log=str(audit))
    with Client(daemon.target) as client, client.session() as session:
        session.write_file_bytes("a", b"abc")
        session.read_file_bytes("a")
        session.stat("a")
        session.exec(["cat", "a"])
        with pytest.raises(RemoteFileNotFoundError):
            session.read_file_bytes("missing")
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    done = {e["event"]: e for e in events if e["session_id"] == session.id and not e["code"]}
    assert done["file.write"]["bytes"] == 3 and done["file.read"]["bytes"] == 3
    assert done["file.stat"]["path"] == "a"
    argv = hashlib.sha256(b"cat\0a").hexdigest()
    assert (done["exec"]["args_sha256"], done["exec"]["exit_code"]) == (argv, 0)
    [refused] = [e for e in events if e["event"] == "file.read" and e["code"]]
    assert refused["code"] == "NOT_FOUND"


def test_file_reads_and_writes_take_the_tenants_transfer_slots(make_daemon):
    daemon = make_daemon(shares={"transfers_per_tenant": 1})
    with Client(daemon.target) as client, client.session() as session:
        session.write_file_bytes("big", os.urandom(8 << 20))
        request = pb.ReadFileRequest(session_id=session.id, path="big")
        holding = client.stub.ReadFile(request)
        assert next(holding).data  # its slot is held while it is not read on
        for call in (
            lambda: session.read_file_bytes("big"),
            lambda: session.write_file_bytes("other", b"x"),
        ):
            with pytest.raises(ToolrtRpcError) as refused:
                call()
            assert refused.value.reason == "QUOTA_EXCEEDED"
            assert "transfers_per_tenant" in refused.value.details
        holding.cancel()

        def slot_free() -> bool:
            try:
                return session.write_file_bytes("other", b"x") == 1
            except ToolrtRpcError:
                return False  # the cancelled read's slot is not back yet

        wait_for(slot_free)
