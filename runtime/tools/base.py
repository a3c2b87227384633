"""What every tool is made of, and the context it runs in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from runtime.agent.redact import Redactor
from runtime.config import Limits, ShellConfig
from runtime.policy.allowlist import PathPolicy
from runtime.sandbox.agent_client import AgentClient
from runtime.tools.shell_state import ToolState

ArgsT = TypeVar("ArgsT", bound=BaseModel)
# (snapshot manifest entries, read a blob by its SHA-256)
Baseline = tuple[list[Any], Callable[[str], bytes]]


@dataclass
class ToolContext:
    """Everything a tool may use: the session's sandbox and its settings."""

    session_id: str
    # The tool call being run (its result is kept under this id in the sandbox).
    call_id: str
    # The session's in-sandbox agent: typed requests, failures as ToolFailure.
    agent: AgentClient
    limits: Limits
    env: dict[str, str]
    kill_grace_s: float
    stream_cap_bytes: int
    # Set by ExecuteStream: receives (stream name, raw bytes) as they arrive.
    on_output: Callable[[str, bytes], None] | None = None
    shell: ShellConfig = field(default_factory=ShellConfig)
    # The session's mutable per-tool state (e.g. the shell's working directory).
    state: ToolState = field(default_factory=ToolState)
    # The session's path allowlist (file tools and `cwd`).
    allowlist: PathPolicy = field(default_factory=PathPolicy)
    # Redacts the session's secrets from what a tool builds of file contents.
    redactor: Redactor = field(default_factory=Redactor)
    # Commands are sent with `resume`: the agent answers a call id it knows
    # (a previous daemon started it) from what it kept instead of running it.
    resume: bool = False
    # workspace_diff's other side: the session's workspace entries at "start"
    # or at a snapshot id, and a reader of their contents by hash.
    baseline: Callable[[str], Awaitable[Baseline]] | None = None


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
    # Its side effects happen in one agent command carrying the call id, so
    # a call cut off by a daemon restart can be resumed (ToolContext.resume).
    # A call of a tool that is neither this nor read-only answers
    # OUTCOME_UNKNOWN when it was cut off.
    resumable: bool = False
    # It reads the workspace into the daemon: its calls take turns within
    # their session and tenant (config: shares.workspace_diffs_per_session/_tenant).
    holds_workspace: bool = False

    def schema(self) -> dict[str, Any]:
        return self.arguments.model_json_schema()
