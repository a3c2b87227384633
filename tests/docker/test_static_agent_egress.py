"""The egress checks of test_egress.py, run unchanged on the static agent
(`agent = "static"`): its relay of 127.0.0.1:3128 to the session's proxy."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from runtime.client import Client
from tests.docker import test_egress as egress
from tests.egress_upstreams import Upstreams, upstreams
from tests.helpers import run_check

pytestmark = [pytest.mark.docker, pytest.mark.static_agent]

CHECKS = {
    name: getattr(egress, f"test_{name}")
    for name in (
        "pip_install_from_the_test_index",
        "curl_and_urllib_through_connect_and_plain_http",
        "a_host_off_the_list_gets_403_and_is_listed",
        "the_byte_cap_cuts_a_large_download_and_says_so",
        "200_connections_of_one_session_do_not_starve_another",
        "closing_the_session_closes_its_proxy_and_socket",
    )
}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstreams]:
    with upstreams(tmp_path_factory.mktemp("upstreams")) as running:
        yield running


@pytest.mark.parametrize("name", CHECKS)
def test_static_agent_passes_the_python_agents_egress_checks(
    make_daemon: Any, docker_client: Any, servers: Upstreams, name: str
) -> None:
    image = egress.recipe_image()
    docker_client.images.get(image)  # `make image` builds it
    network = {"allow_max": egress.allow_max(servers), "hosts": egress.PINNED}
    daemon = make_daemon(agent="static", image=image, network=network)
    with Client(daemon.target) as client:
        run_check(CHECKS[name], client=client, servers=servers, egress=daemon)
