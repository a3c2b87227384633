"""The idempotency journal, without a daemon: repeats, conflicts, cut-offs, bounds."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime.models import ToolCall, ToolResult
from runtime.sessions.journal import Journal, fingerprint


class Counter:
    """A stand-in for running a call: counts runs, answers with the run number."""

    def __init__(self, output_bytes: int = 0) -> None:
        self.runs = 0
        self.output_bytes = output_bytes

    async def __call__(self, call: ToolCall) -> ToolResult:
        self.runs += 1
        await asyncio.sleep(0)
        return ToolResult(call.id, {"run": self.runs, "pad": "x" * self.output_bytes})


def run(journal: Journal, counter: Counter, call: ToolCall) -> ToolResult:
    return asyncio.run(journal.run_once(call, lambda: counter(call)))


def shell(call_id: str, arguments: str) -> ToolCall:
    return ToolCall(call_id, "shell", arguments)


def test_repeat_returns_first_result_without_running():
    journal, counter = Journal(), Counter()
    first = run(journal, counter, shell("a", '{"command": "echo hi", "timeout_s": 5}'))
    again = run(journal, counter, shell("a", '{ "timeout_s" : 5.0,\n "command":"echo hi"}'))
    assert again == first and counter.runs == 1


def test_same_id_other_arguments_or_tool_is_invalid_arguments():
    journal, counter = Journal(), Counter()
    run(journal, counter, shell("a", '{"command": "echo hi"}'))
    other = run(journal, counter, shell("a", '{"command": "echo bye"}'))
    assert other.error is not None and other.error.code == "INVALID_ARGUMENTS"
    assert "'a'" in other.error.message and "new id" in other.error.message
    renamed = run(journal, counter, ToolCall("a", "read_file", '{"command": "echo hi"}'))
    assert renamed.error is not None and renamed.error.code == "INVALID_ARGUMENTS"
    assert counter.runs == 1


@pytest.mark.parametrize(
    ("left", "right", "same"),
    [
        ('{"a": 1, "b": [1, 2]}', '{"b":[1,2],"a":1}', True),
        ('{"a": 1}', '{"a": 1.0}', True),
        ('{"a": 100}', '{"a": 1e2}', True),
        ('{"a": 1}', '{"a": "1"}', False),
        ('{"a": [1, 2]}', '{"a": [2, 1]}', False),
        ('{"a": 1, "a": 2}', '{"a": 2}', True),  # JSON: the last duplicate wins
        ('{"a": 1, "cwd": null}', '{"a": 1}', True),  # null means absent
        ('{"a": {"b": null}}', '{"a": {}}', False),  # ... for arguments, not inside them
        ("not json", "not json", True),
        ("not json", "not  json", False),
        ("[" * 100_000, "[" * 100_000, True),  # too deep to parse: compared as text
    ],
)
def test_fingerprint_compares_parsed_json(left, right, same):
    assert (fingerprint(shell("x", left)) == fingerprint(shell("x", right))) is same


def test_a_repeat_while_the_first_runs_waits_for_it():
    async def scenario() -> tuple[Any, Any, int]:
        journal = Journal()
        release = asyncio.Event()
        runs = 0

        async def slow() -> ToolResult:
            nonlocal runs
            runs += 1
            await release.wait()
            return ToolResult("a", {"done": True})

        call = shell("a", "{}")
        first = asyncio.ensure_future(journal.run_once(call, slow))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(journal.run_once(call, slow))
        await asyncio.sleep(0)
        assert not second.done()
        release.set()
        return await first, await second, runs

    first, second, runs = asyncio.run(scenario())
    assert first == second and first.output == {"done": True} and runs == 1


def test_a_cut_off_first_attempt_is_outcome_unknown_for_every_repeat():
    async def scenario() -> tuple[ToolResult, ToolResult, int]:
        journal = Journal()
        runs = 0

        async def forever() -> ToolResult:
            nonlocal runs
            runs += 1
            await asyncio.Event().wait()
            raise AssertionError

        call = shell("a", "{}")
        first = asyncio.ensure_future(journal.run_once(call, forever))
        await asyncio.sleep(0)
        waiting = asyncio.ensure_future(journal.run_once(call, forever))
        await asyncio.sleep(0)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        later = await journal.run_once(call, forever)
        return await waiting, later, runs

    waiting, later, runs = asyncio.run(scenario())
    assert runs == 1
    for result in (waiting, later):
        assert result.error is not None and result.error.code == "OUTCOME_UNKNOWN"
        assert "will not run again" in result.error.message and result.output == {}


def test_cancelling_a_waiting_repeat_leaves_the_first_running():
    async def scenario() -> ToolResult:
        journal = Journal()
        release = asyncio.Event()

        async def slow() -> ToolResult:
            await release.wait()
            return ToolResult("a", {"done": True})

        call = shell("a", "{}")
        first = asyncio.ensure_future(journal.run_once(call, slow))
        await asyncio.sleep(0)
        repeat = asyncio.ensure_future(journal.run_once(call, slow))
        await asyncio.sleep(0)
        repeat.cancel()
        release.set()
        return await first

    assert asyncio.run(scenario()).output == {"done": True}


def test_results_are_bounded_and_old_ids_are_refused_not_rerun():
    journal, counter = Journal(max_results=3, max_bytes=1 << 20, max_ids=5), Counter()
    for i in range(9):
        run(journal, counter, shell(f"c{i}", "{}"))
    assert len(journal) == 3 and counter.runs == 9
    assert run(journal, counter, shell("c8", "{}")).output["run"] == 9  # still kept
    dropped = run(journal, counter, shell("c1", "{}"))
    assert dropped.error is not None and dropped.error.code == "OUTCOME_UNKNOWN"
    assert "no longer kept" in dropped.error.message
    conflict = run(journal, counter, shell("c5", '{"x": 1}'))
    assert conflict.error is not None and conflict.error.code == "INVALID_ARGUMENTS"
    assert counter.runs == 9
    # Past max_ids an id is forgotten entirely (c0 is the oldest of six dropped).
    assert run(journal, counter, shell("c0", "{}")).output["run"] == 10


def test_results_are_bounded_by_bytes():
    journal, counter = Journal(max_results=100, max_bytes=3000), Counter(output_bytes=1000)
    for i in range(10):
        run(journal, counter, shell(f"c{i}", "{}"))
    assert journal.kept_bytes <= 3000 and 1 <= len(journal) <= 3
    assert run(journal, counter, shell("c9", "{}")).output["run"] == 10


@pytest.mark.parametrize(
    "text",
    ["x" * 3_000_000, "é" * 700_000 + "\ud800" + "😀" * 300_000, '{"command": "ls"', "[1]"],
)
def test_a_large_or_raw_text_is_fingerprinted_as_one_piece_would_be(text):
    # Hashed a slice at a time (so no one encode holds the interpreter lock
    # for megabytes), the fingerprint is still that of the whole text: ids
    # stored before keep matching after an upgrade.
    import hashlib

    from runtime.sessions.journal import fingerprint

    call = ToolCall(id="c", name="shell", arguments_json=text)
    whole = f"shell\x00\x00raw\x00{text}".encode("utf-8", "surrogatepass")
    assert fingerprint(call) == hashlib.sha256(whole).hexdigest()
