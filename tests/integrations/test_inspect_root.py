"""inspect's `self_check` again, on a session that may do what the suite's
root checks do: run as root with root's capabilities, add a user to a
writable root filesystem (runtime `runsc-overlay`) and run as that user.
scripts/test_integrations.sh grants these to the daemon's default tenant."""

from __future__ import annotations

from collections.abc import AsyncIterator

import docker
import pytest
import pytest_asyncio
from inspect_ai.util import SandboxEnvironment
from inspect_ai.util._sandbox.self_check import *  # noqa: F403  (the checks, collected here)
from inspect_sample import default_sandbox

from runtime.integrations.inspect import ToolrtSandboxConfig

RUNTIME = "runsc-overlay"
TASK = "self_check_root"
# The user test_exec_as_user adds; a session may run as it only if it lists it.
ADDED_USER = "inspect-ai-test-exec-as-user"


def _registered(runtime: str) -> bool:
    client = docker.from_env()
    try:
        return runtime in client.info().get("Runtimes", {})
    finally:
        client.close()


pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(
        not _registered(RUNTIME),
        reason=f"the engine has no runtime {RUNTIME} (scripts/ensure-docker.sh registers it)",
    ),
]


# One session serves every check, as inspect's own runner shares one per module.
@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sandbox_env() -> AsyncIterator[SandboxEnvironment]:
    config = ToolrtSandboxConfig(
        runtime=RUNTIME, root_filesystem="writable", users=("root", ADDED_USER)
    )
    async with default_sandbox(TASK, config) as env:
        yield env
