"""The daemon under test is the one `scripts/test_integrations.sh` started
(`TOOLRT_TARGET`); every test must leave no session of its own open."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.integrations.connection import client_from_env


@pytest.fixture(scope="session")
def client() -> Iterator[Client]:
    if not os.environ.get("TOOLRT_TARGET"):
        pytest.fail("TOOLRT_TARGET is not set: run these tests with `make test-integrations`")
    with client_from_env() as c:
        yield c


@pytest.fixture(autouse=True)
def no_session_left(client: Client) -> Iterator[None]:
    before = {s.id for s in client.list_sessions()}
    yield
    left = [s.id for s in client.list_sessions() if s.id not in before and s.state == "ready"]
    assert not left, f"sessions left open: {left}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A module's `EXPECTED_FAILURES` (check name → why) marks those checks
    strict xfail: each must still fail for its reason, and says so when it
    stops failing."""
    for item in items:
        reasons = getattr(getattr(item, "module", None), "EXPECTED_FAILURES", {})
        name = getattr(item, "originalname", item.name)
        if name in reasons:
            item.add_marker(pytest.mark.xfail(strict=True, reason=reasons[name]))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool:
    """The main suite (`make test`, `make test-fast`) leaves these out: they need
    the harnesses' virtualenv and a daemon of their own (`make test-integrations`)."""
    return config.inipath != Path(__file__).with_name("pytest.ini")
