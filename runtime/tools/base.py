"""What every tool is made of, and the context it runs in."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from runtime.config import Limits, ShellConfig
from runtime.errors import (
    FileMissing,
    InternalFailure,
    InvalidArguments,
    LimitExceeded,
    PathDenied,
    ToolFailure,
)
from runtime.policy.allowlist import PathPolicy
from runtime.sandbox.backend import EventSink, Sandbox

ArgsT = TypeVar("ArgsT", bound=BaseModel)

# Agent error codes → the failure the model sees.
_AGENT_FAILURES: dict[str, type[ToolFailure]] = {
    "NOT_FOUND": FileMissing,
    "PATH_DENIED": PathDenied,
    "LIMIT_EXCEEDED": LimitExceeded,
    "INVALID_ARGUMENTS": InvalidArguments,
}


@dataclass
class ToolContext:
    """Everything a tool may use: the session's sandbox and its settings."""

    session_id: str
    sandbox: Sandbox
    limits: Limits
    env: dict[str, str]
    kill_grace_s: float
    stream_cap_bytes: int
    # Set by ExecuteStream: receives (stream name, raw bytes) as they arrive.
    on_output: Callable[[str, bytes], None] | None = None
    shell: ShellConfig = field(default_factory=ShellConfig)
    # The session's mutable per-tool state (e.g. the shell's working directory).
    state: dict[str, Any] = field(default_factory=dict)
    # The session's path allowlist (file tools and `cwd`).
    allowlist: PathPolicy = field(default_factory=PathPolicy)

    async def agent(
        self,
        op: str,
        header: dict[str, Any],
        body: bytes = b"",
        on_event: EventSink | None = None,
    ) -> tuple[dict[str, Any], bytes]:
        """One request to the in-sandbox agent; its errors become failures.

        If the caller goes away mid-request, the agent is told to kill what
        the request started before the cancellation goes on.
        """
        request_id = self.sandbox.next_request_id()
        try:
            reply, data = await self.sandbox.request(op, header, body, on_event, request_id)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await self.sandbox.cancel(request_id, "cancelled")
            raise
        if reply.get("op") == "error":
            failure = _AGENT_FAILURES.get(str(reply.get("code")), InternalFailure)
            raise failure(str(reply.get("message", "the sandbox reported an error")))
        return reply, data


@dataclass(frozen=True)
class Tool(Generic[ArgsT]):
    """A tool: arguments model (its JSON Schema), job-ad description, code."""

    name: str
    description: str
    arguments: type[ArgsT]
    run: Callable[[ToolContext, ArgsT], Awaitable[dict[str, Any]]]
    # Read-only tools of one batch may run in parallel; the others are
    # serialized per session, in call order.
    read_only: bool = False

    def schema(self) -> dict[str, Any]:
        return self.arguments.model_json_schema()
