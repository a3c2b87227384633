"""No spare shell starts under a shell that is not bash (a BusyBox-only
image): its boot line needs bash's `read -n 1 -u` and `read -d ''`."""

from __future__ import annotations

from typing import Any

import pytest

from tests.docker import test_static_agent as static_agent
from tests.helpers import shell_after_a_pause

pytestmark = [pytest.mark.docker, pytest.mark.static_agent]

# The BusyBox-only image, built offline: the static agent module's fixture.
busybox_image = static_agent.busybox_image


def test_a_spare_serves_under_bash_and_none_starts_under_busybox_sh(
    client: Any, busybox_image: str
) -> None:
    with client.session() as session:
        assert shell_after_a_pause(client, session) == "spare"
    with client.session(image=busybox_image) as session:
        assert shell_after_a_pause(client, session) == "own"
