"""The static agent's channel: the protocol on a unix socket the agent dials.

Under gVisor, root in a sandbox can reopen the container's stdin and stdout
through /proc/1/fd (host pipes owned by the host's root), and so read the
daemon's frames and forge the agent's answers; a socket cannot be opened
there at all. So a static agent under Docker speaks on `agent.sock` in its
relay directory (relay_dirs.py, bind-mounted read-only at RELAY_DIR), which
the daemon listens on only while it waits for the agent:

- at creation, before the container starts; the first connection is the
  agent's (nothing else runs in the sandbox before the agent's hello), and
  the daemon's first frame on it is a Channel carrying a fresh token;
- at re-adoption, after a restart; the agent, told by SIGUSR1, dials and
  presents the token, and only a connection presenting it is taken (root in
  the sandbox may dial too, but never saw the token).

The token is kept in `<state_dir>/channels/<session id>` (mode 0600), so a
restarted daemon can re-adopt, and removed with the container.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable

from runtime.agent import protocol
from runtime.config import Config
from runtime.errors import SandboxLost
from runtime.sandbox.relay_dirs import relay_dir
from runtime.state.db import default_state_dir

SOCKET_NAME = os.path.basename(protocol.AGENT_SOCKET)
TOKEN_BYTES = 32
# A Channel frame's header is ~60 bytes: anything much larger is not one.
MAX_CHANNEL_HEADER = 1024
# Connections waiting to present a token: root in the sandbox may dial as
# fast as it likes, so past this many the oldest is closed, and each has
# this long to present it (the agent writes it as soon as it connects).
MAX_UNCHECKED = 32
PRESENT_TIMEOUT_S = 2.0
# While waiting for the agent's first connection, how often to look whether
# its container ended (an agent that cannot run never dials).
EXIT_POLL_S = 0.5

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class StreamSource:
    """The agent's bytes from its socket (a framing.ByteSource)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    async def read(self) -> bytes:
        return await self._reader.read(1 << 20)


def socket_path(config: Config, session_id: str) -> str:
    return os.path.join(relay_dir(config, session_id), SOCKET_NAME)


def token_path(config: Config, session_id: str) -> str:
    state_dir = config.state_dir or default_state_dir(config.instance)
    return os.path.join(state_dir, "channels", os.path.basename(relay_dir(config, session_id)))


def new_token(config: Config, session_id: str) -> str:
    """A fresh token for the session's channel, written where re-adoption reads it."""
    token = secrets.token_hex(TOKEN_BYTES)
    path = token_path(config, session_id)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token)
    return token


def kept_token(config: Config, session_id: str) -> str:
    """The token a previous daemon kept ("" when none is)."""
    try:
        with open(token_path(config, session_id)) as kept:
            return kept.read().strip()
    except FileNotFoundError:
        return ""


def remove_token(config: Config, session_id: str) -> None:
    with contextlib.suppress(FileNotFoundError, ValueError):
        os.unlink(token_path(config, session_id))


def channel_frame(token: str) -> bytes:
    return protocol.encode(protocol.Channel(token=token), 0, 0)


async def read_channel_frame(reader: asyncio.StreamReader) -> str:
    """The token of the Channel frame a connection starts with."""
    prefix = await reader.readexactly(protocol.PREFIX.size)
    magic, header, body = protocol.PREFIX.unpack(prefix)
    if magic != protocol.MAGIC or header > MAX_CHANNEL_HEADER or body:
        msg = "not a Channel frame"
        raise protocol.FrameError(msg)
    frames = protocol.Decoder().feed(prefix + await reader.readexactly(header))
    if len(frames) != 1:
        msg = "not a Channel frame"
        raise protocol.FrameError(msg)
    return frames[0].as_type(protocol.Channel).token


class Listener:
    """agent.sock, listened on until one connection is taken: the first one,
    or (given a token) the first presenting it."""

    def __init__(self, path: str, token: str = "") -> None:
        self._path = path
        self._token = token
        self._server: asyncio.AbstractServer | None = None
        self._taken: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._handed = False
        self._closed = False
        # Connections still to present the token, oldest first, each with the
        # task checking it: closing a connection ends its check (its read
        # sees the end), so none needs cancelling and none outlives close().
        self._checks: dict[asyncio.StreamWriter, asyncio.Task[None]] = {}

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path)
        self._server = await asyncio.start_unix_server(
            self._connected, path=self._path, limit=1 << 22
        )
        os.chmod(self._path, 0o600)

    def close(self) -> None:
        """Stop listening: nothing can dial the socket any more, and every
        connection not taken is closed, its check with it."""
        self._closed = True
        if self._server is not None:
            self._server.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path)
        for writer in list(self._checks):
            writer.close()
        if self._taken.done() and not self._handed:
            self._taken.result()[1].close()

    def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Called by the server as it accepts, not in a task of its own: a
        # connection is registered (or closed) at once, so none can be left
        # open by a task that never ran (one accepted as the loop stops).
        if self._closed:
            writer.close()  # accepted in the turn that closed the listener
        elif not self._token:
            self._take((reader, writer))
        else:
            check = asyncio.get_running_loop().create_task(self._check(reader, writer))
            self._checks[writer] = check
            if len(self._checks) > MAX_UNCHECKED:
                next(iter(self._checks)).close()

    async def _check(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Take the connection if it presents the token in time; close it if not."""
        try:
            presented = await asyncio.wait_for(read_channel_frame(reader), PRESENT_TIMEOUT_S)
        except (
            asyncio.IncompleteReadError,
            protocol.FrameError,
            ConnectionError,
            TimeoutError,
        ):
            presented = ""
        except BaseException:
            writer.close()
            raise
        finally:
            self._checks.pop(writer, None)
        if hmac.compare_digest(presented.encode(), self._token.encode()):
            self._take((reader, writer))
        else:
            writer.close()

    def _take(self, connection: Connection) -> None:
        # Closed: nobody will take it (an agent's late re-dial dials again).
        if self._closed or self._taken.done():
            connection[1].close()
        else:
            self._taken.set_result(connection)

    async def first(
        self, timeout_s: float, ended_by_itself: Callable[[], Awaitable[bool]]
    ) -> Connection:
        """The first connection (a new container's agent). TimeoutError when
        none comes in time, SandboxLost when the container ends first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError
            with contextlib.suppress(TimeoutError):
                return await self._hand(min(left, EXIT_POLL_S))
            if await ended_by_itself():
                msg = "the agent exited before it dialed the daemon"
                raise SandboxLost(msg)

    async def presenting(self, timeout_s: float) -> Connection:
        """The first connection presenting the token (a running agent
        re-dialing); TimeoutError when none does in time."""
        return await self._hand(timeout_s)

    async def _hand(self, timeout_s: float) -> Connection:
        connection = await asyncio.wait_for(asyncio.shield(self._taken), timeout_s)
        self._handed = True
        return connection


@contextlib.asynccontextmanager
async def listening(path: str, token: str = "") -> AsyncIterator[Listener]:
    """Listen on `path` for the duration of the block (for the connection
    presenting `token`, or with none the first one)."""
    listener = Listener(path, token)
    await listener.start()
    try:
        yield listener
    finally:
        listener.close()
