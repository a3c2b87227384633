"""The programs' RPCs are tenant-scoped and audited like every other: another
tenant's session is NOT_FOUND with reason SESSION_NOT_FOUND, and the
refusal is recorded."""

from __future__ import annotations

import grpc
import pytest

from runtime.client import ToolrtRpcError


def test_another_tenants_session_is_session_not_found(secured):
    alice, bob = secured.client("alice"), secured.client("bob")
    theirs = alice.create_session().id
    for event, call in (
        ("file.stat", lambda: bob.stat(theirs, "/")),
        ("file.read", lambda: bob.read_file_bytes(theirs, "/etc/passwd")),
        ("file.write", lambda: bob.write_file_bytes(theirs, "x", b"x")),
        ("exec", lambda: bob.exec(theirs, ["true"])),
    ):
        with pytest.raises(ToolrtRpcError) as gone:
            call()
        assert (gone.value.code, gone.value.reason) == (
            grpc.StatusCode.NOT_FOUND,
            "SESSION_NOT_FOUND",
        ), event
        [record] = [e for e in secured.audit() if e["event"] == event]
        assert (record["tenant"], record["session_id"], record["code"]) == (
            "bob",
            theirs,
            "NOT_FOUND",
        )


def test_a_malformed_exec_is_invalid_request(secured):
    alice = secured.client("alice")
    theirs = alice.create_session().id
    for fields in ({}, {"command": "true", "argv": ["true"]}, {"argv": [""]}, {"argv": ["a\0b"]}):
        with pytest.raises(ToolrtRpcError) as bad:
            alice.exec(theirs, **fields)
        assert (bad.value.code, bad.value.reason) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_REQUEST",
        ), fields


def test_an_unknown_token_is_unauthenticated_with_its_reason(secured):
    stranger = secured.client(token="not-a-token")
    with pytest.raises(ToolrtRpcError) as refused:
        stranger.stat("any", "/")
    assert (refused.value.code, refused.value.reason) == (
        grpc.StatusCode.UNAUTHENTICATED,
        "UNAUTHENTICATED",
    )
