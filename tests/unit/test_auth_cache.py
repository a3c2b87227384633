"""Token checks remembered per peer: no hash per call, revocation still seen in time."""

from __future__ import annotations

import pytest

import runtime.auth.tokens as tokens_module
from runtime.auth.credentials import Authenticator, Credentials
from runtime.auth.tokens import TokenStore, create_token, revoke_token
from runtime.config import AuthConfig
from runtime.errors import Unauthenticated
from tests.helpers import ManualClock as Clock

PEER = "ipv4:10.0.0.1:5555"


def _bearer(token: str, peer: str = PEER) -> Credentials:
    return Credentials(authorization=[f"Bearer {token}"], peer=peer)


def test_a_peers_token_is_hashed_once_until_the_file_changes(tmp_path, monkeypatch):
    path = tmp_path / "tokens"
    _, token = create_token(path, "alice")
    hashed: list[str] = []
    digest = tokens_module.token_digest

    def counted(value: str) -> str:
        hashed.append(value)
        return digest(value)

    monkeypatch.setattr(tokens_module, "token_digest", counted)
    clock = Clock()
    auth = Authenticator(AuthConfig(tokens_file=str(path)), TokenStore(path, clock=clock))
    for _ in range(5):
        assert auth.authenticate(_bearer(token)).tenant == "alice"
    assert len(hashed) == 1
    assert auth.authenticate(_bearer(token, "ipv4:10.0.0.2:5555")).tenant == "alice"
    assert len(hashed) == 2
    # A wrong token is never remembered: each try is checked.
    for _ in range(2):
        with pytest.raises(Unauthenticated):
            auth.authenticate(_bearer(token[:-1] + ("A" if token[-1] != "A" else "B")))
    assert len(hashed) == 4


def test_a_revoked_token_is_refused_within_the_files_check_interval(tmp_path):
    path = tmp_path / "tokens"
    record, token = create_token(path, "alice")
    clock = Clock()
    store = TokenStore(path, check_interval_s=1.0, clock=clock)
    auth = Authenticator(AuthConfig(tokens_file=str(path)), store)
    assert auth.authenticate(_bearer(token)).name == record.id
    revoke_token(path, record.id)
    clock.now = 1.0
    with pytest.raises(Unauthenticated, match="not valid"):
        auth.authenticate(_bearer(token))
