"""The programs' RPC fuzz (test_fuzz_programs) on the static agent: any start,
follow-ups, path or write is answered with a documented status, never
INTERNAL, and the daemon and the agent serve on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.docker import test_fuzz_programs as fuzz_programs
from tests.fuzzing import watched

pytestmark = [pytest.mark.docker, pytest.mark.fuzz, pytest.mark.static_agent]


@pytest.fixture
def fuzzed(make_daemon: Any, docker_client: Any, caplog: Any) -> Iterator[Any]:
    daemon = make_daemon(agent="static")
    with watched(daemon, docker_client, caplog, limits={"call_timeout_s": 5}) as pair:
        yield pair


test_exec_answers_any_start_and_follow_ups = (
    fuzz_programs.test_exec_answers_any_start_and_follow_ups
)
test_read_and_stat_answer_any_path = fuzz_programs.test_read_and_stat_answer_any_path
test_write_answers_any_start = fuzz_programs.test_write_answers_any_start
