"""The sandbox's end of network egress: 127.0.0.1:3128 relayed to the daemon's proxy.

A session given network has its commands' HTTP_PROXY/HTTPS_PROXY point at
127.0.0.1:3128 in the container's own network namespace (which has only
loopback). The agent, root, listens there and pipes each connection, byte
for byte, to the unix socket the daemon's proxy for this session listens
on, in a directory the daemon bind-mounted at the container's creation
(mode 0700: the sandbox user cannot reach the socket but through here).
All policy is the proxy's; the relay adds nothing and reads nothing.

The relay runs an asyncio loop on a thread of its own (relay_server.py,
imported only then), started by the `relay_start` operation, so a flood of
connections never delays the agent's loop. The socket is looked up per connection: a daemon that
restarts and listens anew is reached without restarting the relay; while
nothing listens, clients get a 502 that says so.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from . import protocol
from .ops import operation

if TYPE_CHECKING:
    from .loop import Agent
    from .relay_server import Relay as Relay


@operation(protocol.RelayStart)
def op_relay_start(agent: Agent, rid: int, request: protocol.RelayStart, body: bytes) -> None:
    relay = agent.relay
    if relay is not None and relay.alive:
        if (relay.socket, relay.port) != (request.socket, request.port):
            message = f"the relay already runs on port {relay.port} to {relay.socket}"
            agent.fail(rid, protocol.INVALID_ARGUMENTS, message)
            return
        agent.send(protocol.RelayReady(port=relay.port), rid)
        return
    if not os.path.isdir(os.path.dirname(request.socket)):
        message = f"{os.path.dirname(request.socket)}: no relay directory in this sandbox"
        agent.fail(rid, protocol.NOT_FOUND, message)
        return
    # Imported here: sessions without network never pay for asyncio.
    from .relay_server import Relay

    relay = Relay(request.socket, request.port)
    try:
        relay.start()
    except OSError as exc:
        agent.fail(rid, protocol.INTERNAL, f"cannot listen on 127.0.0.1:{request.port}: {exc}")
        return
    agent.relay = relay
    agent.send(protocol.RelayReady(port=relay.port), rid)
