"""On the real engine: a tenant's containers carry its label, and its sessions its name."""

from __future__ import annotations

import pytest

from runtime.auth.tokens import create_token
from runtime.client import Client
from tests.helpers import containers_of

pytestmark = pytest.mark.docker


def test_containers_carry_the_tenant_of_the_token(make_daemon, docker_client, tmp_path):
    tokens_file = tmp_path / "tokens"
    _, alice = create_token(tokens_file, "alice")
    daemon = make_daemon(auth={"tokens_file": str(tokens_file)})
    with Client(daemon.target, token=alice) as client, client.session() as session:
        assert session.info.tenant == "alice"
        (container,) = containers_of(docker_client, daemon.instance)
        assert container.labels["toolrt.tenant"] == "alice"
        assert container.labels["toolrt.session"] == session.id
        assert session.shell("id -u").output["stdout"].strip() == "1000"
