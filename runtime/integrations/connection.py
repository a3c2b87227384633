"""The daemon a provider talks to, and the sessions it creates there.

Providers are built with no arguments: the target and credentials come from
the same variables the `toolrt` command reads (`TOOLRT_TARGET`,
`TOOLRT_TOKEN`, `TOOLRT_TLS_CA`, `TOOLRT_TLS_CERT`, `TOOLRT_TLS_KEY`).
"""

from __future__ import annotations

import os
from typing import Any

import grpc

from runtime.client import TLS, Client, SessionHandle, ToolrtRpcError
from runtime.client.aio import AsyncClient
from runtime.constants import INTEGRATION_LABEL

# Every session a provider creates carries it, valued with the harness's name,
# so a harness's cleanup can tell its sessions from anyone else's.
# The state of a session that can run commands.
READY = "ready"


class SandboxGone(Exception):
    """The session is closed, expired or lost its sandbox: nothing more can run there."""


def tls_from_env() -> TLS | None:
    """TLS files from the `TOOLRT_TLS_*` variables; None when none is set."""
    env = os.environ.get
    ca, cert, key = env("TOOLRT_TLS_CA", ""), env("TOOLRT_TLS_CERT", ""), env("TOOLRT_TLS_KEY", "")
    return TLS(ca_file=ca, cert_file=cert, key_file=key) if ca or cert or key else None


def client_from_env() -> Client:
    """A client of the daemon the `TOOLRT_*` variables name (TLS when any TLS one is set)."""
    return Client(tls=tls_from_env())


def async_client_from_env() -> AsyncClient:
    """`client_from_env` for asyncio harnesses."""
    return AsyncClient(tls=tls_from_env())


def open_session(client: Client, harness: str, **fields: Any) -> SessionHandle:
    """A new session labelled as created by `harness` (request labels are kept)."""
    labels = {**fields.pop("labels", {}), INTEGRATION_LABEL: harness}
    return client.session(labels=labels, **fields)


def attach_session(client: Client, session_id: str) -> SessionHandle:
    """The open session `session_id`; raises `SandboxGone` when it is not open."""
    try:
        info = client.get_session(session_id)
    except ToolrtRpcError as exc:
        if exc.code != grpc.StatusCode.NOT_FOUND:
            raise
        raise SandboxGone(exc.details) from exc
    if info.state != READY:
        msg = f"session {session_id} is {info.state}: {info.closed_reason or 'no reason given'}"
        raise SandboxGone(msg)
    return SessionHandle(client, info)


def harness_sessions(client: Client, harness: str) -> list[str]:
    """Ids of the caller's open sessions that `harness` created."""
    return [
        s.id
        for s in client.list_sessions()
        if s.labels.get(INTEGRATION_LABEL) == harness and s.state == READY
    ]


def close_quietly(client: Client, session_id: str) -> None:
    """Close a session, whatever state it is in: gone already is as good as closed."""
    try:
        client.close_session(session_id)
    except ToolrtRpcError as exc:
        if exc.code != grpc.StatusCode.NOT_FOUND:
            raise
