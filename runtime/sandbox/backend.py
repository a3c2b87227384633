"""The small interface between tools/sessions and whatever hosts sandboxes,
and what every backend shares: where the agent lives, who the sandbox user
is, and a Sandbox over an agent connection.

Backends: docker/ (the real thing), local.py (the real agent as a child
process, for tests), fake.py (in memory, scripted, for tests).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from runtime import agent as agent_package
from runtime.agent import protocol
from runtime.config import Limits
from runtime.constants import DEFAULT_TENANT
from runtime.sandbox import agent_dir
from runtime.sandbox.agent_client import AgentClient
from runtime.sandbox.framing import FrameChannel

LABEL_SESSION = "toolrt.session"
LABEL_DAEMON = "toolrt.daemon"
LABEL_TENANT = "toolrt.tenant"
# The agent package's mount point; its name is the package's name there.
AGENT_DIR_IN_SANDBOX = "/opt/toolrt/agent"


def agent_command(channel: bool = False) -> list[str]:
    """The sandbox's main process, the static agent, as the sandbox sees it.
    With `channel` it dials protocol.AGENT_SOCKET instead of speaking on its
    stdio (docker/channel.py)."""
    static = [f"{AGENT_DIR_IN_SANDBOX}/{agent_dir.STATIC_AGENT}"]
    return [*static, "--channel", protocol.AGENT_SOCKET] if channel else static


def prepare_agent_dir(target: str = "") -> str:
    """The agent's directory on this host, ready to mount (see `agent_dir.prepare`):
    the package's own, or `target` with the package's agent copied in; the
    native helper built there when a compiler exists, byte-compiled in place.

    Sandboxes mount the directory read-only and cannot cache bytecode
    themselves: without this every start of the python tool's interpreter
    compiles it anew. Python versions that do not match just compile as
    before; a read-only install is left alone.
    """
    return agent_dir.prepare(Path(agent_package.__file__).resolve().parent, target)


def new_epoch() -> int:
    """A backend's attach epoch: every frame to an agent carries it, and a
    frame of another epoch is stale."""
    return secrets.randbits(62) | 1


@dataclass(frozen=True)
class SandboxSpec:
    """What a new sandbox must look like."""

    session_id: str
    image: str
    limits: Limits
    tenant: str = DEFAULT_TENANT
    labels: dict[str, str] = field(default_factory=dict)
    runtime: str = ""
    # Root's capabilities (ROOT_CAPS) join the container's bounding set.
    root_capabilities: bool = False
    # The root filesystem is writable (on a runtime that bounds it).
    writable_root: bool = False


class Sandbox(Protocol):
    """A live sandbox: its agent answers typed requests (agent_client.py)."""

    @property
    def id(self) -> str: ...

    @property
    def lost(self) -> str:
        """Why the sandbox is gone ("" while it is alive)."""
        ...

    @property
    def agent(self) -> AgentClient: ...

    def abort(self, reason: str, error: Exception | None = None) -> None:
        """Fail every pending request now with SANDBOX_LOST (`reason`), or `error`."""
        ...

    def watch(self, on_lost: Callable[[str], None]) -> None:
        """Call `on_lost(reason)` when the sandbox dies by itself."""
        ...


class Channel(FrameChannel, Protocol):
    """A FrameChannel its backend can close (framing.AgentConnection, fake.FakeChannel)."""

    def abort(self, reason: str, error: Exception | None = None) -> None: ...

    def close(self) -> None: ...


class ConnectedSandbox:
    """A Sandbox whose agent answers over a Channel."""

    def __init__(self, session_id: str, connection: Channel) -> None:
        self._id = session_id
        self._conn = connection
        self._agent = AgentClient(connection)

    @property
    def id(self) -> str:
        return self._id

    @property
    def lost(self) -> str:
        return self._conn.lost

    @property
    def agent(self) -> AgentClient:
        return self._agent

    def abort(self, reason: str, error: Exception | None = None) -> None:
        self._conn.abort(reason, error)

    def watch(self, on_lost: Callable[[str], None]) -> None:
        """Have `on_lost(reason)` called when the agent goes away by itself
        (connections that can tell: framing.AgentConnection)."""
        if hasattr(self._conn, "on_lost"):
            self._conn.on_lost = on_lost

    def close(self) -> None:
        self._conn.close()


@dataclass
class Adopted:
    """A re-attached sandbox and what its agent said in its hello."""

    sandbox: Sandbox
    hello: protocol.HelloReply


@dataclass(frozen=True)
class EngineInfo:
    # e.g. "docker 20.10.24+dfsg1".
    name: str
    # OCI runtime new sandboxes run under.
    runtime: str


@dataclass(frozen=True)
class Usage:
    cpu_seconds: float
    memory_bytes: int


# What a backend reports when it cannot tell a sandbox's usage.
NO_USAGE = Usage(-1.0, -1)


class NotOffered(Exception):
    """An optional capability the backend has not got; the message says which."""


class SandboxBackend(Protocol):
    """Creates, lists and destroys sandboxes; knows nothing of tools.

    Backends subclass it: the optional capabilities at its end have
    defaults here, which a backend that has one overrides.
    """

    async def create(self, spec: SandboxSpec) -> Sandbox: ...

    async def destroy(self, sandbox_id: str) -> None:
        """Remove the sandbox and everything in it; idempotent."""
        ...

    async def list_owned(self) -> list[str]:
        """Session ids of the sandboxes this daemon instance owns."""
        ...

    async def reap_owned(self) -> int:
        """Remove every sandbox of this instance (a previous run's leftovers)."""
        ...

    async def close(self) -> None: ...

    # -- optional ------------------------------------------------------------
    async def adopt(self, sandbox_id: str) -> Adopted:
        """Re-attach a sandbox a previous daemon left running (what
        `list_owned` lists); fails if it cannot."""
        msg = "this backend cannot re-attach sandboxes"
        raise NotOffered(msg)

    async def update_limits(self, sandbox_id: str, limits: Limits) -> None:
        """Give a (warm) sandbox other limits of memory, cpus and pids."""
        msg = "the backend cannot change limits"
        raise NotOffered(msg)

    async def describe_engine(self) -> EngineInfo | None:
        """What engine runs the sandboxes, for the Admin* RPCs (None: it cannot say)."""
        return None

    async def usage(self, sandbox_id: str) -> Usage:
        """What a sandbox uses, for the Admin* RPCs."""
        return NO_USAGE
