"""The relay's server: 127.0.0.1:3128 piped to the daemon's proxy (relay.py).

An asyncio loop on a thread of its own, so a flood of connections never
delays the agent's loop. Imported only when a session gets network: asyncio
and its dependencies cost an idle agent about 8 MiB of memory.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import List, Optional, Tuple

from .pipe import Joint

# Connections relayed at once; the proxy has its own, lower, per-session cap.
MAX_CLIENTS = 1024
START_TIMEOUT_S = 5.0
# How long a connection waits while the proxy's accept queue is full.
CONNECT_PATIENCE_S = 5.0
UNAVAILABLE = (
    "toolrt: this session's network proxy is not reachable right now "
    "(the daemon may be restarting); retry in a few seconds\n"
)


def _unavailable() -> bytes:
    body = UNAVAILABLE.encode()
    head = (
        "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


async def _dial(path: str) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the unix socket at `path`, waiting while its backlog is full.

    A non-blocking unix connect fails with EAGAIN then, and asyncio would
    take the unconnected socket for a connected one.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CONNECT_PATIENCE_S
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(path)
        except BlockingIOError:
            sock.close()
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.01)
            continue
        except OSError:
            sock.close()
            raise
        return await asyncio.open_unix_connection(sock=sock)


class Relay:
    def __init__(self, socket: str, port: int) -> None:
        self.socket = socket
        self.port = port
        self.clients = 0
        self._ready = threading.Event()
        self._errors: List[BaseException] = []
        self._thread: Optional[threading.Thread] = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Listen, on the relay's thread; OSError when the port cannot be bound."""
        self._thread = threading.Thread(target=self._main, name="relay", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            msg = f"the relay did not start listening within {START_TIMEOUT_S:g} s"
            raise OSError(msg)
        if self._errors:
            raise self._errors[0]

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(
                asyncio.start_server(self._serve, "127.0.0.1", self.port, backlog=512)
            )
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._errors.append(exc)
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        loop.run_forever()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        if self.clients >= MAX_CLIENTS:
            client_w.close()
            return
        self.clients += 1
        try:
            try:
                proxy = await _dial(self.socket)
            except OSError:
                client_w.write(_unavailable())
                await client_w.drain()
                return
            await Joint((client_r, client_w), proxy).run()
        except OSError:
            pass
        finally:
            self.clients -= 1
            client_w.close()
