"""The small interface between tools/sessions and whatever hosts sandboxes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from runtime.config import Limits

# Called (on the event loop, in order) with each frame the agent streams
# before its final answer; it must not block.
EventSink = Callable[[dict[str, Any], bytes], None]

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
    """A live sandbox: requests go to its agent, one frame answers each."""

    @property
    def id(self) -> str: ...

    @property
    def lost(self) -> str:
        """Why the sandbox is gone ("" while it is alive)."""
        ...

    def next_request_id(self) -> int:
        """A fresh id, so a request can be cancelled while it runs."""
        ...

    async def request(
        self,
        op: str,
        header: dict[str, Any],
        body: bytes = b"",
        on_event: EventSink | None = None,
        request_id: int | None = None,
    ) -> tuple[dict[str, Any], bytes]:
        """Send one request; the agent's final frame (header, body)."""
        ...

    async def cancel(self, request_id: int, reason: str) -> None:
        """Ask the agent to kill what a running request started."""
        ...

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
