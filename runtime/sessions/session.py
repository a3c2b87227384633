"""One session: its sandbox, its settings, and its state."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from runtime.agent.redact import Redactor
from runtime.config import Limits
from runtime.policy.allowlist import PathPolicy
from runtime.policy.hosts import NetworkPolicy
from runtime.sandbox.backend import Sandbox
from runtime.sessions.journal import Journal
from runtime.tools.shell_state import ToolState

READY = "ready"
CLOSING = "closing"
CLOSED = "closed"


@dataclass
class Session:
    id: str
    tenant: str
    image: str
    limits: Limits
    # The normalized, clamped policy (what CreateSession returns and every
    # file tool and cwd check uses).
    allowlist: PathPolicy
    env: dict[str, str]
    labels: dict[str, str]
    sandbox: Sandbox
    ttl_seconds: float
    idle_seconds: float
    # The hosts it may reach and its caps (no patterns: no network).
    network: NetworkPolicy = field(default_factory=NetworkPolicy)
    # The OCI runtime of its sandbox ("" = the engine's default).
    runtime: str = ""
    created_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)
    state: str = READY
    calls: int = 0
    # The tool of the latest call (what `toolrt top` shows).
    last_tool: str = ""
    # Calls with side effects run one at a time, in arrival order.
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # State tools keep between calls (the shell's directory and environment).
    tool_state: ToolState = field(default_factory=ToolState)
    # Calls and transfers running or waiting right now: a session with one
    # is never idle.
    active_calls: int = 0
    # Answers repeated call ids (idempotency); sized by the manager.
    journal: Journal = field(default_factory=Journal)
    # The names of its secrets, and their redaction for what the daemon
    # builds from file contents itself (its repr shows names only).
    secrets: list[str] = field(default_factory=list)
    redactor: Redactor = field(default_factory=Redactor)
    # Why it closed (state.sessions REASON_*), once it has.
    closed_reason: str = ""
    # Users besides the sandbox user its programs may name, as asked at
    # creation; whether root among them has capabilities (the tenant's
    # root_capabilities); "read-only" or "writable". All fixed at creation.
    users: list[str] = field(default_factory=list)
    root_capabilities: bool = False
    root_filesystem: str = "read-only"

    @property
    def expires_at(self) -> float:
        return self.created_at + self.ttl_seconds if self.ttl_seconds else 0.0

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        """Activity for the idle reaper: never idle inside, last used on leaving."""
        self.active_calls += 1
        self.last_used = time.monotonic()
        try:
            yield
        finally:
            self.active_calls -= 1
            self.last_used = time.monotonic()
