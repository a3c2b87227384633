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


def test_a_request_sets_its_own_labels_and_toolrt_integration_but_no_other_toolrt_label(
    make_daemon, docker_client
):
    daemon = make_daemon()
    asked = {
        "team": "a",
        "toolrt.integration": "inspect",
        "toolrt.session": "forged",
        "toolrt.tenant": "someone-else",
        "toolrt.daemon": "other",
    }
    with Client(daemon.target) as client, client.session(labels=asked) as session:
        assert session.info.labels == {"team": "a", "toolrt.integration": "inspect"}
        (container,) = containers_of(docker_client, daemon.instance)
        labels = container.labels
        assert labels["toolrt.integration"] == "inspect" and labels["team"] == "a"
        assert labels["toolrt.session"] == session.id
        assert labels["toolrt.daemon"] == daemon.instance
        assert labels["toolrt.tenant"] == "default"
