"""The small interface between tools/sessions and whatever hosts sandboxes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from runtime.config import Limits
from runtime.sandbox.agent_client import AgentClient

LABEL_SESSION = "toolrt.session"
LABEL_DAEMON = "toolrt.daemon"
LABEL_TENANT = "toolrt.tenant"


@dataclass(frozen=True)
class SandboxSpec:
    """What a new sandbox must look like."""

    session_id: str
    image: str
    limits: Limits
    tenant: str = "default"
    labels: dict[str, str] = field(default_factory=dict)
    runtime: str = ""


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

    def abort(self, reason: str) -> None:
        """Fail every pending request now with SANDBOX_LOST (`reason`)."""
        ...


class SandboxBackend(Protocol):
    """Creates, lists and destroys sandboxes; knows nothing of tools."""

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
