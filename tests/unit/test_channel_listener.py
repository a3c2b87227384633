"""The agent's channel listener leaves no connection behind once it is closed,
and root dialing it (silently, or with a wrong token) takes nothing and
leaves nothing open (runtime/sandbox/docker/channel.py)."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import pytest

from runtime.sandbox.docker import channel
from runtime.sandbox.docker.channel import channel_frame, listening

TOKEN = "t0k3n"


async def ended(sock: socket.socket, timeout: float = 5) -> bool:
    """Whether the peer closed `sock` (EOF) within `timeout`."""
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    try:
        return await asyncio.wait_for(loop.sock_recv(sock, 1), timeout) == b""
    except TimeoutError:
        return False


async def dial(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, path)
    return sock


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_connection_whose_check_ends_after_close_is_closed_not_kept(tmp_path: Path):
    async def check() -> bool:
        path = str(tmp_path / "agent.sock")
        ours, theirs = socket.socketpair()
        async with listening(path, token=TOKEN) as listener:
            reader, writer = await asyncio.open_unix_connection(sock=ours)
        # Its check running after the listener closed: it presents the right
        # token with nobody left to take it.
        theirs.sendall(channel_frame(TOKEN))
        await listener._check(reader, writer)
        closed = await ended(theirs)
        theirs.close()
        return closed

    assert asyncio.run(check())


def test_a_connection_accepted_after_close_is_closed_at_once(tmp_path: Path):
    async def check() -> tuple[bool, int]:
        path = str(tmp_path / "agent.sock")
        ours, theirs = socket.socketpair()
        async with listening(path, token=TOKEN) as listener:
            reader, writer = await asyncio.open_unix_connection(sock=ours)
        # Accepted in the loop's turn that closed the listener.
        listener._connected(reader, writer)
        closed = await ended(theirs)
        theirs.close()
        return closed, len(listener._checks)

    assert asyncio.run(check()) == (True, 0)


def test_closing_ends_every_unchecked_connection_without_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    # Root dials while the daemon listens: half its connections present a
    # wrong token, half say nothing. Closing the listener closes them all,
    # and their checks end by themselves (no cancelled task for asyncio to
    # log as an error).
    async def attack() -> tuple[list[bool], list[bool], int]:
        path = str(tmp_path / "agent.sock")
        async with listening(path, token=TOKEN) as listener:
            silent = [await dial(path) for _ in range(5)]
            wrong = [await dial(path) for _ in range(5)]
            for sock in wrong:
                sock.send(channel_frame("0" * 64))
            closed_wrong = [await ended(sock) for sock in wrong]
            await settle()
            tasks = list(listener._checks.values())
            assert len(tasks) == len(silent), "each silent connection is being checked"
        closed_silent = [await ended(sock) for sock in silent]
        await asyncio.gather(*tasks, return_exceptions=True)
        for sock in silent + wrong:
            sock.close()
        return closed_wrong, closed_silent, sum(task.cancelled() for task in tasks)

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        closed_wrong, closed_silent, cancelled = asyncio.run(attack())
    assert all(closed_wrong), "a wrong token is refused at once"
    assert all(closed_silent), "a silent connection is closed with the listener"
    assert cancelled == 0
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.text


def test_past_the_limit_the_oldest_silent_connection_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(channel, "MAX_UNCHECKED", 3)

    async def flood() -> list[bool]:
        path = str(tmp_path / "agent.sock")
        async with listening(path, token=TOKEN) as listener:
            socks = [await dial(path) for _ in range(4)]
            await settle()
            first_closed = await ended(socks[0])
            others = [await ended(sock, timeout=0.2) for sock in socks[1:]]
            # The right token still gets through beside the flood.
            agent = await dial(path)
            agent.send(channel_frame(TOKEN))
            _, writer = await listener.presenting(5)
            writer.close()
        for sock in [*socks, agent]:
            sock.close()
        return [first_closed, *others]

    assert asyncio.run(flood()) == [True, False, False, False]
