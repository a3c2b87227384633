"""One inspect sample's toolrt sandboxes, opened and closed as inspect's runner does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from inspect_ai.util import SandboxEnvironment

from runtime.integrations.inspect import ToolrtSandboxConfig, ToolrtSandboxEnvironment


@asynccontextmanager
async def default_sandbox(
    task: str, config: ToolrtSandboxConfig
) -> AsyncIterator[SandboxEnvironment]:
    """The sample's default sandbox; all of the sample's are closed at the end."""
    environments = await ToolrtSandboxEnvironment.sample_init(task, config, {})
    try:
        yield environments["default"]
    finally:
        await ToolrtSandboxEnvironment.sample_cleanup(task, config, environments, False)
