"""Two tenants on one daemon over real TLS: isolation on every RPC, quotas, and
the audit log read line by line."""

from __future__ import annotations

import hashlib
import time

import grpc

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from tests.helpers import make_tar
from tests.unit.secured import status_of

NOT_FOUND = grpc.StatusCode.NOT_FOUND
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


def tar_of(name: str, data: bytes) -> bytes:
    return make_tar((name, "file", data))


def every_session_rpc(client):
    """Each RPC that names a session, as a call on `session_id`."""
    shell = pb.ToolCall(id="b1", name="shell", arguments_json='{"command": "true"}')
    message = [{"id": "m1", "name": "shell", "arguments": {"command": "true"}}]
    return {
        "GetSession": lambda sid: client.get_session(sid),
        "Execute": lambda sid: client.call(sid, "shell", {"command": "true"}),
        "ExecuteBatch": lambda sid: client.stub.ExecuteBatch(
            pb.ExecuteBatchRequest(session_id=sid, calls=[shell]), metadata=client.metadata
        ),
        "ExecuteStream": lambda sid: client.stream(sid, "shell", {"command": "true"}),
        "ExecuteMessage": lambda sid: client.execute_message(sid, "neutral", message),
        "UploadFiles": lambda sid: client.upload(sid, tar_of("x.txt", b"x")),
        "DownloadFiles": lambda sid: client.download(sid, ["/workspace"]),
        "CloseSession": lambda sid: client.close_session(sid),
    }


def test_another_tenants_session_is_not_found_like_one_that_never_existed(secured):
    alice, bob = secured.client("alice"), secured.client("bob")
    theirs = alice.create_session().id
    alice.upload(theirs, tar_of("secret.txt", b"alice's"))
    never = "0" * 32
    guessed = theirs[:-4] + ("ffff" if not theirs.endswith("ffff") else "0000")
    for name, rpc in every_session_rpc(bob).items():
        taken = status_of(lambda rpc=rpc: rpc(theirs))
        unknown = status_of(lambda rpc=rpc: rpc(never))
        assert taken is not None and taken[0] == NOT_FOUND, (name, taken)
        assert taken == (unknown[0], unknown[1].replace(never, theirs)), name
        assert status_of(lambda rpc=rpc: rpc(guessed))[0] == NOT_FOUND, name
    assert bob.list_sessions() == []
    # Untouched: alice's session is open, with her file, and her calls only.
    assert alice.get_session(theirs).calls == 0
    assert b"alice's" in alice.download(theirs, ["/workspace/secret.txt"])
    assert [s.id for s in alice.list_sessions()] == [theirs]
    # Bob's attempts are in the audit log, as his.
    refused = [r for r in secured.audit() if r["principal"] == secured.ids["bob"]]
    assert refused and {r["code"] for r in refused} == {"NOT_FOUND"}
    assert {r["rpc_status"] for r in refused} == {"NOT_FOUND"}


def test_closing_another_tenants_closed_session_is_not_found_too(secured):
    alice, bob = secured.client("alice"), secured.client("bob")
    sid = alice.create_session().id
    assert alice.close_session(sid) == "closed"
    assert alice.close_session(sid) == "closed"  # idempotent for its owner
    code, details = status_of(lambda: bob.close_session(sid))
    assert code == NOT_FOUND and details == f"no session {sid!r}"


def test_quotas_per_tenant(secure_daemon):
    secured = secure_daemon(
        tenants={
            "alice": {
                "max_sessions": 1,
                "images": ["toolrt-sandbox:*"],
                "runtimes": [""],
                "calls_per_second": 0.5,
                "burst": 2,
            },
            "default": {"max_memory_bytes": 1 << 30},
        }
    )
    alice, bob = secured.client("alice"), secured.client("bob")
    code, details = status_of(lambda: alice.create_session(image="python:3"))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "tenant alice may not use image 'python:3'; its images: toolrt-sandbox:*" in details
    sid = alice.create_session().id
    code, details = status_of(alice.create_session)
    assert code == EXHAUSTED and "max_sessions quota is 1" in details
    assert alice.call(sid, "shell", {"command": "true"}).ok
    assert alice.call(sid, "shell", {"command": "true"}).ok
    code, details = status_of(lambda: alice.call(sid, "shell", {"command": "true"}))
    assert code == EXHAUSTED and "calls_per_second quota (0.5, burst 2); retry in" in details
    calls = [pb.ToolCall(id=f"c{i}", name="shell", arguments_json="{}") for i in range(3)]
    batch = pb.ExecuteBatchRequest(session_id=sid, calls=calls)
    code, details = status_of(lambda: alice.stub.ExecuteBatch(batch, metadata=alice.metadata))
    assert code == EXHAUSTED and "a batch of 3 calls exceeds tenant alice's burst of 2" in details
    # Bob falls under [tenants.default]: his own ceilings, none of alice's.
    first = bob.create_session(limits=pb.Limits(memory_bytes=512 << 20, workspace_bytes=64 << 20))
    for _ in range(5):
        assert bob.call(first.id, "shell", {"command": "true"}).ok
    code, details = status_of(lambda: bob.create_session(limits=pb.Limits(memory_bytes=600 << 20)))
    assert code == EXHAUSTED and "max_memory_bytes quota" in details
    # Closing gives the share back.
    bob.close_session(first.id)
    bob.create_session(limits=pb.Limits(memory_bytes=600 << 20, workspace_bytes=64 << 20))


def test_the_audit_log_line_by_line(secured):
    alice = secured.client("alice")
    sid = alice.create_session().id
    arguments = '{"command":  "echo hi",  "timeout_s": 5}'  # hashed exactly as sent
    alice.call(sid, "shell", arguments, call_id="call-1")
    alice.call(sid, "read_file", {"path": "missing.txt"}, call_id="call-2")
    alice.upload(sid, tar_of("a.txt", b"12345"))
    archive = alice.download(sid, ["/workspace/a.txt"])
    list(alice.stream(sid, "shell", {"command": "true"}, call_id="call-3"))
    alice.close_session(sid)
    intruder = secured.client(token="trt_000000000000_" + "A" * 43)
    for _ in range(30):
        status_of(intruder.list_sessions)
    secured.flush_denials()
    lines = secured.audit()
    assert [r["event"] for r in lines] == [
        "session.create", "call", "call", "upload", "download", "call", "session.close",
        "auth.denied",
    ]  # fmt: skip
    for line in lines[:-1]:
        assert (line["tenant"], line["principal"], line["session_id"]) == (
            "alice",
            secured.ids["alice"],
            sid,
        )
    created, first, second, upload, download, streamed, closed, denied = lines
    assert first["call_id"] == "call-1" and first["tool"] == "shell"
    assert first["args_sha256"] == hashlib.sha256(arguments.encode()).hexdigest()
    assert first["args_bytes"] == len(arguments) and first["code"] == ""
    assert first["exit_code"] == 0 and first["output_bytes"] > 0
    assert (second["code"], second["exit_code"]) == ("NOT_FOUND", None)
    assert (upload["files"], upload["bytes"]) == (1, 5)
    assert download["bytes"] == len(archive)
    assert streamed["call_id"] == "call-3"
    assert closed["reason"] == "closed"
    assert (denied["peer"], denied["count"], denied["reasons"]) == ("127.0.0.1", 30, {"wrong": 30})
    text = secured.audit_file.read_text()
    assert "echo hi" not in text and "missing.txt" not in text


def test_sessions_the_daemon_ends_are_recorded(secured):
    alice = secured.client("alice")
    sid = alice.create_session(idle_seconds=1).id
    deadline = time.monotonic() + 10
    while not any(r["event"] == "session.close" for r in secured.audit()):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    closed = secured.audit()[-1]
    assert (closed["session_id"], closed["tenant"], closed["principal"]) == (sid, "alice", "")
    assert "idle" in closed["reason"]


def test_an_unwritable_audit_log_refuses_calls_until_it_can_write(secure_daemon, tmp_path):
    link, target = tmp_path / "audit-link", tmp_path / "audit.jsonl"
    link.symlink_to("/dev/full")
    secured = secure_daemon(audit_log=str(link))
    alice = secured.client("alice")
    code, details = status_of(alice.create_session)
    assert code == grpc.StatusCode.UNAVAILABLE
    assert f"the audit log {link} cannot be written (No space left on device)" in details
    code, details = status_of(alice.create_session)
    assert code == grpc.StatusCode.UNAVAILABLE and "record(s) waiting" in details
    assert alice.list_sessions() == []  # the unrecorded session was closed again
    link.unlink()
    link.symlink_to(target)
    time.sleep(1.1)
    sid = alice.create_session().id
    secured.audit_file = target
    events = [(r["event"], r.get("reason", "")) for r in secured.audit()]
    assert events == [
        ("session.create", ""),
        ("session.close", "unrecorded"),
        ("session.create", ""),
    ]
    assert secured.audit()[-1]["session_id"] == sid
