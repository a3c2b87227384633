"""Providers reach the daemon the `TOOLRT_*` variables name, as the CLI does."""

from __future__ import annotations

import grpc
import pytest

from runtime.client import ToolrtRpcError
from runtime.integrations.connection import client_from_env

SYSTEM_CAS = "/etc/ssl/certs/ca-certificates.crt"


def test_target_and_token_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with client_from_env() as client:
        client.list_sessions()  # TOOLRT_TARGET: the daemon of this run
    monkeypatch.setenv("TOOLRT_TOKEN", "t0ken")
    with client_from_env() as client, pytest.raises(ToolrtRpcError) as refused:
        client.list_sessions()
    # The daemon saw the token (and judged its shape).
    assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert "the token is 5 characters" in refused.value.details


def test_a_tls_variable_turns_tls_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # The daemon of this run speaks plaintext: a TLS client cannot reach it.
    monkeypatch.setenv("TOOLRT_TLS_CA", SYSTEM_CAS)
    with client_from_env() as client, pytest.raises(ToolrtRpcError) as refused:
        client.list_sessions()
    assert refused.value.code == grpc.StatusCode.UNAVAILABLE
