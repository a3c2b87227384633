"""The daemon's event loop is kept for I/O: heavy parsing and matching run off it.

Parsing 16 MiB of arguments, matching a `wait_for` pattern against a
chatty process's output, or reading a JUnit report of 300,000 cases used to
run on the loop and stall every other session for about a second. Each test
runs the heavy work and meanwhile times a cheap call (GetSession) and the
loop itself (a 10 ms timer on it): both must stay quick.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from runtime import cpu
from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import Client
from runtime.client.sdk import Result
from runtime.config import Config
from runtime.dialects import registry as dialects
from runtime.dialects.common import MAX_MESSAGE_ITEMS
from runtime.errors import BadRequest
from tests.conftest import RunningDaemon
from tests.helpers import make_tar, under_gvisor

# Generous: the machine is shared and loaded. The stalls these tests catch
# were a second or more (two on a machine half as fast). Alone the JUnit
# case's longest gap is about 0.1 s; late in a whole gVisor run, beside the
# sandboxes of the tests before it, it once reached 0.51 s.
MAX_STALL_S = 0.8


class Stalls:
    """The longest wait for a cheap call, and the loop's longest gap, meanwhile."""

    def __init__(self, daemon: RunningDaemon, client: Client, session_id: str) -> None:
        self.daemon = daemon
        self.client = client
        self.session_id = session_id
        self.call_s = 0.0
        self.loop_gap_s = 0.0
        self.probes = 0
        self.stop = threading.Event()

    async def _watch_loop(self) -> None:
        last = time.monotonic()
        while not self.stop.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            self.loop_gap_s = max(self.loop_gap_s, now - last - 0.01)
            last = now

    def _probe(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            self.client.get_session(self.session_id)
            self.call_s = max(self.call_s, time.monotonic() - started)
            self.probes += 1
            time.sleep(0.02)

    @contextmanager
    def watching(self) -> Iterator[Stalls]:
        watcher = asyncio.run_coroutine_threadsafe(self._watch_loop(), self.daemon.loop)
        prober = threading.Thread(target=self._probe, daemon=True)
        prober.start()
        try:
            yield self
        finally:
            self.stop.set()
            prober.join(30)
            watcher.result(30)

    def check(self) -> None:
        assert self.probes > 0
        shown = f"a cheap call waited {self.call_s:.2f} s, the loop {self.loop_gap_s:.2f} s"
        assert self.call_s < MAX_STALL_S and self.loop_gap_s < MAX_STALL_S, shown


def under_watch(daemon: RunningDaemon, client: Client, heavy: Callable[[], Any]) -> Any:
    """`heavy()`, run while another session's cheap calls are timed."""
    with client.session() as other:
        stalls = Stalls(daemon, client, other.id)
        with stalls.watching():
            time.sleep(0.1)
            result = heavy()
        stalls.check()
    return result


def just_under(limit: int, head: str, item: str, tail: str) -> str:
    count = (limit - len(head) - len(tail)) // (len(item) + 1)
    return head + ",".join([item] * count) + tail


def test_large_inputs_are_worked_on_off_the_loop_and_small_ones_inline():
    async def threads() -> tuple[threading.Thread, threading.Thread]:
        small = await cpu.compute(100, threading.current_thread)
        large = await cpu.compute(cpu.INLINE_BYTES + 1, threading.current_thread)
        return small, large

    small, large = asyncio.run(threads())
    assert small is threading.current_thread()
    assert large.name.startswith("toolrt-cpu")


@pytest.mark.docker
def test_huge_arguments_are_parsed_off_the_loop(daemon, client, session):
    limit = Config().max_argument_bytes
    many = just_under(limit - 16, '{"command": "true", "x": [', "1", "]}")
    one_long = json.dumps({"command": "true", "stdin": "a" * (limit - 64)})
    assert len(many) < limit and len(one_long) < limit

    # The same arguments as a provider's message, one tool call in it.
    message = {
        "role": "assistant",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": one_long}}
        ],
    }

    def heavy() -> list[Any]:
        calls = [session.call("shell", text) for text in (many, many, one_long)]
        return [*calls, *session.execute_message("openai", message)[1]]

    refused, _, ran, ran_from_message = under_watch(daemon, client, heavy)
    assert refused.error_code == "INVALID_ARGUMENTS"
    assert "items" in refused.error_message, refused.error_message
    for result in (ran, ran_from_message):
        assert result.ok and result.output["exit_code"] == 0, result


def test_a_message_of_too_many_items_is_refused_before_it_is_parsed():
    text = "[" + ",".join(["1"] * (MAX_MESSAGE_ITEMS + 1)) + "]"
    with pytest.raises(BadRequest, match=f"more than {MAX_MESSAGE_ITEMS} items"):
        dialects.parse_message("openai", text)


@pytest.mark.docker
def test_wait_for_patterns_are_matched_off_the_loop(daemon, client, session):
    # Chatty processes: a burst of lines every tenth of a second. One under
    # gVisor, where each such loop holds about 100 of the sentry's host
    # processes against the pids limit (DESIGN, platform notes): two end
    # the sandbox at the default limit there.
    handles = [
        session.shell("while :; do yes | head -c 262144; sleep 0.1; done", background=True)
        for _ in range(1 if under_gvisor() else 8)
    ]
    ids = [h.output["process_id"] for h in handles]
    # Never matches, and costs a while over a megabyte of "y\n" lines.
    pattern = "(?:y\\n){10}z"

    calls = [
        pb.ToolCall(
            id=f"w{i}",
            name="process_output",
            arguments_json=json.dumps({"process_id": pid, "wait_for": pattern, "timeout_s": 5}),
        )
        for i, pid in enumerate(ids)
    ]

    def heavy() -> list[Result]:
        # One model turn of read-only calls: they wait side by side.
        request = pb.ExecuteBatchRequest(session_id=session.id, calls=calls)
        return [Result.from_pb(r) for r in client.stub.ExecuteBatch(request).results]

    results = under_watch(daemon, client, heavy)
    for result in results:
        # Under load a search may outrun its time limit: an answer either way.
        assert (result.ok and result.output["matched"] is False) or (
            result.error_code == "INVALID_ARGUMENTS" and "too long" in result.error_message
        ), result
    for pid in ids:
        session.call("process_kill", {"process_id": pid})


JUNIT_CONFTEST = '''
def pytest_unconfigure(config):
    """Replace pytest's report with one of 300,000 cases, one of them failed."""
    path = getattr(config.option, "xmlpath", None)
    if not path:
        return
    cases = 300_000
    with open(path, "w") as report:
        report.write('<?xml version="1.0" encoding="utf-8"?><testsuites>')
        report.write(f'<testsuite name="pytest" failures="1" tests="{cases}">')
        report.write('<testcase classname="t" name="bad"><failure message="boom"/></testcase>')
        for i in range(cases - 1):
            report.write(f'<testcase classname="t" name="t{i}"/>')
        report.write("</testsuite></testsuites>")
'''


@pytest.mark.docker
def test_a_huge_junit_report_is_read_off_the_loop(daemon, client, session):
    session.upload(
        make_tar(
            ("conftest.py", "file", JUNIT_CONFTEST),
            ("test_one.py", "file", "def test_one():\n    pass\n"),
        )
    )
    result = under_watch(daemon, client, lambda: session.call("run_tests", {}))
    assert result.ok, result
    out = result.output
    assert (out["passed"], out["failed"]) == (299_999, 1), out
    assert out["failures"] == [{"test_id": "t::bad", "message": "boom"}]
