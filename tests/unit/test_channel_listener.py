"""The agent's channel listener leaves no connection behind once it is closed
(runtime/sandbox/docker/channel.py)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from runtime.sandbox.docker.channel import channel_frame, listening


def test_a_connection_whose_check_ends_after_close_is_closed_not_kept(tmp_path: Path):
    async def check() -> bytes:
        path = str(tmp_path / "agent.sock")
        ours, theirs = socket.socketpair()
        async with listening(path, token="t0k3n") as listener:
            reader, writer = await asyncio.open_unix_connection(sock=ours)
        # Accepted before the listener closed, its check running after (as
        # a connection accepted in the loop's turn that closes it): it
        # presents the right token with nobody left to take it.
        theirs.sendall(channel_frame("t0k3n"))
        await listener._connected(reader, writer)
        loop = asyncio.get_running_loop()
        theirs.setblocking(False)
        got = await asyncio.wait_for(loop.sock_recv(theirs, 1), 5)  # EOF: closed
        theirs.close()
        return got

    assert asyncio.run(check()) == b""
