"""The egress checks of test_egress.py, run unchanged on the static agent
(`agent = "static"`): its relay of 127.0.0.1:3128 to the session's proxy."""

from __future__ import annotations

from typing import Any

import pytest

from tests.docker import test_egress as egress_tests

# The module's fixtures and checks, collected here again (egress below is
# the static agent's daemon).
from tests.docker.test_egress import (  # noqa: F401
    client,
    image,
    servers,
    test_200_connections_of_one_session_do_not_starve_another,
    test_a_host_off_the_list_gets_403_and_is_listed,
    test_closing_the_session_closes_its_proxy_and_socket,
    test_curl_and_urllib_through_connect_and_plain_http,
    test_pip_install_from_the_test_index,
    test_the_byte_cap_cuts_a_large_download_and_says_so,
)

pytestmark = pytest.mark.docker


@pytest.fixture
def egress(make_daemon: Any, image: str, servers: Any) -> Any:  # noqa: F811
    network = {"allow_max": egress_tests.allow_max(servers), "hosts": egress_tests.PINNED}
    return make_daemon(agent="static", image=image, network=network)
