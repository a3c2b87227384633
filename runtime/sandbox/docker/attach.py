"""The attach stream: a container's stdin/stdout as the agent's byte stream.

One HTTP connection to the engine's socket per sandbox, upgraded to a raw
stream: what the daemon writes is the agent's stdin; what it reads is the
agent's stdout and stderr, multiplexed behind 8-byte headers (tty=False).
"""

from __future__ import annotations

import asyncio
import logging

from runtime.sandbox.docker.errors import check_attach_status, map_attach_errors

log = logging.getLogger(__name__)


class DockerAttachSource:
    """The agent's stdout out of Docker's multiplexed attach stream (a
    framing.ByteSource); stderr frames are logged, not returned."""

    HEADER = 8

    def __init__(self, reader: asyncio.StreamReader, name: str) -> None:
        self._reader = reader
        self._name = name

    async def read(self) -> bytes:
        while True:
            try:
                head = await self._reader.readexactly(self.HEADER)
                payload = await self._reader.readexactly(int.from_bytes(head[4:8], "big"))
            except asyncio.IncompleteReadError:
                return b""
            if head[0] == 2:
                log.debug("agent %s stderr: %r", self._name, payload[:500])
                continue
            if payload:
                return payload


async def open_attach(
    socket_path: str, api_version: str, container_id: str, what: str, timeout_s: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Attach to a container's stdin/stdout/stderr (before it starts, so not a
    byte is missed); the raw stream's reader and writer."""
    with map_attach_errors(what, timeout_s):
        reader, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(socket_path, limit=1 << 22), timeout_s
        )
    try:
        with map_attach_errors(what, timeout_s):
            writer.write(
                (
                    f"POST /v{api_version}/containers/{container_id}/attach"
                    "?stream=1&stdin=1&stdout=1&stderr=1 HTTP/1.1\r\n"
                    "Host: docker\r\nUpgrade: tcp\r\nConnection: Upgrade\r\n\r\n"
                ).encode()
            )
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout_s)
        check_attach_status(what, head)
    except BaseException:
        writer.close()
        raise
    return reader, writer
