"""Fixtures of the engine-free gRPC tests: a daemon with authentication on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.pki import CA
from tests.unit.secured import Secured, issue_tokens


@pytest.fixture
def pki(tmp_path: Path) -> CA:
    return CA(tmp_path)


@pytest.fixture
def secure_daemon(make_daemon: Any, tmp_path: Path, pki: CA) -> Iterator[Callable[..., Secured]]:
    """Start a secured daemon with extra config overrides (e.g. tenants)."""
    made: list[Secured] = []

    def make(**overrides: Any) -> Secured:
        tokens_file = tmp_path / f"tokens-{len(made)}"
        audit_file = tmp_path / f"audit-{len(made)}.jsonl"
        tokens, ids = issue_tokens(tokens_file)
        server = pki.server()
        auth = {
            "tokens_file": str(tokens_file),
            "tls_cert_file": server.cert_file,
            "tls_key_file": server.key_file,
        }
        auth.update(overrides.pop("auth", {}))
        overrides.setdefault("audit_log", str(audit_file))
        daemon = make_daemon(backend="fake", auth=auth, **overrides)
        secured = Secured(daemon, pki, tokens_file, audit_file, tokens, ids)
        made.append(secured)
        return secured

    yield make
    for secured in made:
        secured._clients.close()


@pytest.fixture
def secured(secure_daemon: Callable[..., Secured]) -> Secured:
    return secure_daemon()
