"""The `toolrt` inspect sandbox against inspect's own conformance suite
(`self_check`, on one default toolrt session), and the failures inspect names
that the suite leaves out. test_inspect_root.py runs the suite again on a
session granted root and a writable root."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from inspect_ai.util import OutputLimitExceededError, SandboxEnvironment
from inspect_ai.util._sandbox.limits import override_max_exec_output_size
from inspect_ai.util._sandbox.registry import registry_find_sandboxenv
from inspect_ai.util._sandbox.self_check import *  # noqa: F403  (the checks, collected here)
from inspect_sample import default_sandbox

from runtime.integrations.inspect import ToolrtSandboxConfig, ToolrtSandboxEnvironment

# One session serves every check, as inspect's own runner shares one per module.
pytestmark = pytest.mark.asyncio(loop_scope="module")

TASK = "self_check"
EXPECTED_FAILURES = {
    "test_exec_as_user": (
        "the check adds a user as root: a default session lists no other user "
        "(SandboxUserUnsupportedError) and its root filesystem is read-only"
    ),
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sandbox_env() -> AsyncIterator[SandboxEnvironment]:
    config = ToolrtSandboxConfig()
    async with default_sandbox(TASK, config) as env:
        yield env


async def test_the_entry_point_registers_the_toolrt_sandbox_type() -> None:
    assert registry_find_sandboxenv("toolrt") is ToolrtSandboxEnvironment


async def test_a_binary_file_read_as_text_is_a_decode_error(
    sandbox_env: SandboxEnvironment,
) -> None:
    await sandbox_env.write_file("binary.file", b"\xc3\x28")
    with pytest.raises(UnicodeDecodeError):
        await sandbox_env.read_file("binary.file", text=True)
    await sandbox_env.exec(["rm", "binary.file"])


async def test_output_past_inspects_limit_is_an_output_limit_error(
    sandbox_env: SandboxEnvironment,
) -> None:
    with override_max_exec_output_size(1024):
        with pytest.raises(OutputLimitExceededError) as raised:
            await sandbox_env.exec(["sh", "-c", "yes | head -c 4096"])
    assert raised.value.truncated_output == "y\n" * 512


async def test_a_missing_program_is_a_failed_result(sandbox_env: SandboxEnvironment) -> None:
    result = await sandbox_env.exec(["no-such-program"])
    assert (result.success, result.returncode) == (False, 127)
    assert "no-such-program" in result.stderr
