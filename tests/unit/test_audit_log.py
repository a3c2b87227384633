"""The audit log on its own: record shape, refusals counted per peer and minute, failures."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from runtime.audit import AuditLog, record
from runtime.auth.principals import TOKEN, Principal
from runtime.egress.proxy import EgressEvent
from runtime.errors import AuditUnavailable, SessionNotFound
from runtime.models import ToolCall, ToolErrorInfo, ToolResult
from tests.helpers import ManualClock as Clock

ALICE = Principal("alice", "0123456789ab", TOKEN)
NOPE = "no open session 'nope'"


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_call_records_carry_hashes_and_sizes_never_arguments(tmp_path):
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(str(path))
    args = '{"command": "echo s3cret",  "x": "é"}'
    call = ToolCall("c1", "shell", args)
    failed = ToolCall("c2", "read_file", "{}")
    results = [
        ToolResult("c1", {"exit_code": 3, "stdout": "s3cret"}, duration_ms=12),
        ToolResult("c2", {}, ToolErrorInfo("NOT_FOUND", "no such file")),
    ]
    audit.calls(ALICE, "sid", [call, failed], results)
    audit.session("session.create", ALICE, "sid", image="img")
    text = path.read_text()
    assert "s3cret" not in text and "echo" not in text
    first, second, created = lines(path)
    assert first["args_sha256"] == hashlib.sha256(args.encode()).hexdigest()
    assert (first["args_bytes"], first["exit_code"], first["code"]) == (len(args.encode()), 3, "")
    assert first["output_bytes"] == len(results[0].output_json.encode())
    assert (first["tenant"], first["principal"], first["duration_ms"]) == ("alice", ALICE.name, 12)
    assert (second["code"], second["exit_code"]) == ("NOT_FOUND", None)
    assert created["event"] == "session.create" and created["session_id"] == "sid"
    expected = {"ts", "event", "tenant", "principal", "session_id", "call_id", "tool", "code"}
    expected |= {"duration_ms", "args_sha256", "args_bytes", "output_bytes", "exit_code"}
    assert expected <= set(first) and expected <= set(created)
    assert stat_mode(path) == 0o600


def stat_mode(path) -> int:
    return os.stat(path).st_mode & 0o777


def test_refused_rpcs_are_recorded_with_their_status(tmp_path):
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(str(path))
    with (
        pytest.raises(SessionNotFound),
        audit.guard("call", ALICE, "nope", [ToolCall("c", "t", "{}")]),
    ):
        raise SessionNotFound(NOPE)
    (entry,) = lines(path)
    assert (entry["code"], entry["rpc_status"], entry["call_id"]) == ("NOT_FOUND", "NOT_FOUND", "c")


def test_refusals_are_one_line_per_peer_and_window(tmp_path, caplog):
    path = tmp_path / "audit.jsonl"
    clock = Clock()
    clock.now = 120.0
    audit = AuditLog(str(path), clock=clock)
    for _ in range(1000):
        audit.denied("10.0.0.1", "wrong", "the token is not valid")
    audit.denied("10.0.0.1", "missing", "no credentials")
    audit.denied("unix", "malformed", "bad")
    audit.flush_denials()
    assert not path.exists()  # the minute is not over
    clock.now = 180.0
    audit.flush_denials()
    by_peer = {r["peer"]: r for r in lines(path)}
    assert by_peer["10.0.0.1"]["count"] == 1001
    assert by_peer["10.0.0.1"]["reasons"] == {"wrong": 1000, "missing": 1}
    assert by_peer["10.0.0.1"]["ts"].startswith("1970-01-01T00:02:00")
    assert by_peer["unix"]["event"] == "auth.denied"
    # Logged once per peer and minute, not once per refusal.
    assert caplog.text.count("refused authentication from 10.0.0.1") == 1


def test_an_unwritable_log_refuses_until_it_can_write_and_loses_nothing(tmp_path, caplog):
    target = tmp_path / "audit.jsonl"
    link = tmp_path / "audit-link"
    link.symlink_to("/dev/full")
    clock = Clock()
    audit = AuditLog(str(link), clock=clock)
    call = ToolCall("c1", "shell", "{}")
    with pytest.raises(AuditUnavailable, match="cannot be written \\(No space left on device\\)"):
        audit.calls(ALICE, "s", [call], [ToolResult("c1")])
    assert "refusing calls until it can" in caplog.text
    with pytest.raises(AuditUnavailable, match="1 record\\(s\\) waiting"):
        audit.check()
    # Space again (the link now leads to a file): the kept record comes first.
    link.unlink()
    link.symlink_to(target)
    with pytest.raises(AuditUnavailable):
        audit.check()  # retried at most once a second
    clock.now = 1.5
    audit.check()
    audit.session("session.close", ALICE, "s")
    assert [r["event"] for r in lines(target)] == ["call", "session.close"]
    assert "writable again" in caplog.text


def test_a_cut_line_does_not_swallow_the_next_record(tmp_path):
    path = tmp_path / "audit.jsonl"
    path.write_text('{"event": "cut sho')
    AuditLog(str(path)).session("session.close", ALICE, "s")
    assert json.loads(path.read_text().splitlines()[1])["event"] == "session.close"


def test_rotation_reopens_the_file(tmp_path):
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(str(path))
    audit.session("session.create", ALICE, "a")
    os.rename(path, tmp_path / "audit.jsonl.1")
    audit.session("session.create", ALICE, "b")
    assert [r["session_id"] for r in lines(path)] == ["b"]


def test_no_path_no_records(tmp_path):
    audit = AuditLog("")
    audit.session("session.create", ALICE, "a")
    audit.check()


def test_a_session_writes_a_bounded_number_of_network_records_a_minute(tmp_path):
    path = tmp_path / "audit.jsonl"
    clock = Clock()
    clock.now = 120.0
    refused: list[str] = []
    audit = AuditLog(str(path), clock=clock, network_records=3, refused=refused.append)
    # A sandbox looping connects: one refused host many times, then many hosts.
    for _ in range(5000):
        audit.network(EgressEvent("s1", "evil.test", 80, "denied", tenant="alice"))
    for i in range(500):
        audit.network(EgressEvent("s1", f"h{i}.test", 443, "denied", tenant="alice"))
    audit.network(EgressEvent("s2", "pypi.org", 443, "allowed", 10, 2, tenant="bob"))
    written = lines(path)
    assert [(r["session_id"], r["host"]) for r in written] == [
        ("s1", "evil.test"),
        ("s1", "h0.test"),
        ("s1", "h1.test"),
        ("s2", "pypi.org"),
    ]
    assert written[0]["tenant"] == "alice" and written[3]["bytes_in"] == 10
    assert refused == ["audit_network_records"] * 498
    audit.flush_counts()
    assert len(lines(path)) == 4  # the minute is not over
    clock.now = 180.0
    audit.flush_counts()
    (summary,) = lines(path)[4:]
    assert (summary["event"], summary["session_id"], summary["tenant"]) == (
        "network",
        "s1",
        "alice",
    )
    assert summary["decision"] == "repeated" and summary["count"] == 4999 + 498
    assert summary["repeats"] == {"denied evil.test:80": 4999, "other": 498}
    assert summary["ts"].startswith("1970-01-01T00:02:00")


def test_what_waits_for_a_broken_log_is_bounded_in_bytes(tmp_path, caplog):
    link = tmp_path / "audit-link"
    link.symlink_to("/dev/full")
    audit = AuditLog(str(link), pending_bytes=64 * 1024)
    for i in range(2000):
        with pytest.raises(AuditUnavailable) as info:
            audit.session("session.create", ALICE, f"s{i}")
    waiting = int(str(info.value).rsplit(" record(s) waiting", 1)[0].rsplit("(", 1)[1])
    shortest = record("session.create", ALICE, 0.0, session_id="s0")
    record_bytes = len(json.dumps(shortest, separators=(",", ":"))) + 1
    assert waiting <= 64 * 1024 // record_bytes < 2000
    assert "lost while it could not be written (shares.audit_pending_bytes)" in caplog.text
