"""A daemon with authentication on, as the auth and tenant tests use it
(the fixtures `pki`, `secure_daemon` and `secured` are in conftest.py).

TLS with a CA made for the test, a tokens file with tenants alice and bob
and an admin token, an audit log; the sandboxes are the fake backend's, since
none of these tests is about sandboxing.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from runtime.auth.tokens import create_token
from runtime.client import TLS, Client, ToolrtRpcError
from tests.conftest import RunningDaemon
from tests.pki import CA


@dataclass
class Secured:
    daemon: RunningDaemon
    pki: CA
    tokens_file: Path
    audit_file: Path
    tokens: dict[str, str]
    ids: dict[str, str]
    _clients: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def client(self, who: str = "", token: str = "", **tls: str) -> Client:
        """A TLS client as `who` (a name in `tokens`), or with `token` verbatim."""
        token = self.tokens[who] if who else token
        client = Client(self.daemon.target, token=token, tls=TLS(ca_file=self.pki.cert_file, **tls))
        return self._clients.enter_context(client)

    def audit(self) -> list[dict[str, Any]]:
        """The audit log, each line parsed on its own."""
        return [json.loads(line) for line in self.audit_file.read_text().splitlines()]

    def flush_denials(self) -> None:
        audit = self.daemon.daemon.core.audit

        async def flush() -> None:
            audit.flush_denials(everything=True)

        self.daemon.run(flush())


def issue_tokens(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    tokens, ids = {}, {}
    for name, tenant, admin in [
        ("alice", "alice", False),
        ("bob", "bob", False),
        ("ops", "ops", True),
    ]:
        record, tokens[name] = create_token(path, tenant, admin=admin)
        ids[name] = record.id
    return tokens, ids


def status_of(fn: Callable[[], Any]) -> tuple[grpc.StatusCode, str] | None:
    """The gRPC status `fn` ended with (None when it succeeded)."""
    try:
        result = fn()
        if hasattr(result, "__next__"):
            list(result)
    except ToolrtRpcError as exc:
        return exc.code, exc.details
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    return None
