"""The real agent keeps each call's answer by call id until it is acknowledged,
and answers a resumed call id from it instead of running it again (local
backend: the agent as a child process)."""

from __future__ import annotations

import asyncio

import pytest

from runtime.agent import protocol
from runtime.errors import OutcomeUnknown
from runtime.sandbox.backend import ConnectedSandbox
from runtime.sandbox.local import LocalBackend
from tests.helpers import BASE_ENV, with_sandbox

APPEND = "echo ran >> /workspace/count; wc -l < /workspace/count"


def exec_of(call_id: str, resume: bool, command: str = APPEND) -> protocol.Exec:
    return protocol.Exec(command=command, env=BASE_ENV, call_id=call_id, resume=resume)


async def out(sandbox: ConnectedSandbox, request: protocol.Exec) -> str:
    result, body = await sandbox.agent.exec(request)
    return body[: result.stdout.head + result.stdout.tail].decode()


def test_a_resumed_call_is_answered_from_what_the_agent_kept():
    async def check(backend: LocalBackend, sandbox: ConnectedSandbox) -> None:
        assert await out(sandbox, exec_of("a", resume=True)) == "1\n"  # never seen: runs
        assert await out(sandbox, exec_of("a", resume=True)) == "1\n"  # kept: not run again
        hello = await sandbox.agent.hello(10)
        assert hello.unacked == ["a"] and hello.running == []
        await sandbox.agent.ack(["a"])
        with pytest.raises(OutcomeUnknown, match="no longer keeps"):
            await sandbox.agent.exec(exec_of("a", resume=True))  # seen, dropped: not run
        assert await out(sandbox, exec_of("b", resume=False)) == "2\n"
        assert (await sandbox.agent.hello(10)).unacked == ["b"]

    with_sandbox(check)


def test_a_resume_of_a_running_call_waits_for_its_one_answer():
    async def check(backend: LocalBackend, sandbox: ConnectedSandbox) -> None:
        slow = exec_of("s", resume=True, command=f"sleep 0.5; {APPEND}")
        first = asyncio.ensure_future(out(sandbox, slow))
        await asyncio.sleep(0.2)
        assert (await sandbox.agent.hello(10)).running == ["s"]
        second = await out(sandbox, slow)
        assert second == await first == "1\n"

    with_sandbox(check)


def test_a_resumed_write_is_answered_from_what_the_agent_kept_not_written_again():
    async def check(backend: LocalBackend, sandbox: ConnectedSandbox) -> None:
        agent = sandbox.agent
        reply = await agent.write("/workspace/w.txt", b"first", call_id="w", resume=True)
        assert reply.bytes_written == 5  # never seen: written
        await sandbox.agent.exec(exec_of("x", resume=False, command="echo changed > w.txt"))
        again = await agent.write("/workspace/w.txt", b"first!", call_id="w", resume=True)
        assert again.bytes_written == 5  # kept: the first answer, nothing written
        assert await out(sandbox, exec_of("y", resume=False, command="cat w.txt")) == "changed\n"
        assert "w" in (await agent.hello(10)).unacked
        await agent.ack(["w"])
        with pytest.raises(OutcomeUnknown, match="no longer keeps"):
            await agent.write("/workspace/w.txt", b"first", call_id="w", resume=True)
        assert await out(sandbox, exec_of("z", resume=False, command="cat w.txt")) == "changed\n"

    with_sandbox(check)
