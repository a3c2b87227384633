"""The sessions of `toolrt` inspect sandboxes: one per named environment of
a sample, labelled, closed by the sample's (an interrupted one's too), the
task's and the command line's cleanups, and a cancelled exec's command
stopped (here, not beside test_inspect's shared session, which the command
line's cleanup of everything would close)."""

from __future__ import annotations

import asyncio

import pytest
from inspect_ai.util import SandboxEnvironment

from runtime.client import Client
from runtime.constants import INTEGRATION_LABEL
from runtime.integrations.inspect import ToolrtSandboxConfig
from runtime.integrations.inspect import ToolrtSandboxEnvironment as Toolrt


def open_ids(client: Client) -> set[str]:
    return {s.id for s in client.list_sessions() if s.state == "ready"}


def session_ids(environments: dict[str, SandboxEnvironment]) -> list[str]:
    return [env.session.id for env in environments.values() if isinstance(env, Toolrt)]


async def test_a_sample_gets_one_labelled_session_per_environment(client: Client) -> None:
    config = ToolrtSandboxConfig(environments=("default", "victim"))
    environments = await Toolrt.sample_init("two", config, {})
    ids = session_ids(environments)
    try:
        assert list(environments) == ["default", "victim"] and len(set(ids)) == 2
        labels = {s.id: s.labels for s in client.list_sessions()}
        assert all(labels[i][INTEGRATION_LABEL] == "inspect" for i in ids)
        assert all(labels[i]["inspect.task"] == "two" for i in ids)
        await environments["default"].write_file("only-here", "x")
        with pytest.raises(FileNotFoundError):
            await environments["victim"].read_file("only-here")
    finally:
        await Toolrt.sample_cleanup("two", config, environments, False)
    assert not set(ids) & open_ids(client)


async def test_the_cleanups_close_what_samples_left(client: Client) -> None:
    samples = {task: await Toolrt.sample_init(task, None, {}) for task in ("a", "b", "c")}
    [a], [b], [c] = (session_ids(samples[task]) for task in ("a", "b", "c"))
    try:
        await Toolrt.task_cleanup("a", None, cleanup=False)  # --no-sandbox-cleanup
        assert {a, b, c} <= open_ids(client)
        await Toolrt.task_cleanup("a", None, cleanup=True)  # that task's only
        assert a not in open_ids(client) and {b, c} <= open_ids(client)
        await Toolrt.cli_cleanup(b)  # `inspect sandbox cleanup toolrt <id>`
        assert b not in open_ids(client) and c in open_ids(client)
        await Toolrt.cli_cleanup(None)  # `inspect sandbox cleanup toolrt`
        assert c not in open_ids(client)
    finally:
        for task, environments in samples.items():
            await Toolrt.sample_cleanup(task, None, environments, True)


async def test_a_cancelled_exec_stops_its_command_and_an_interrupted_sample_is_closed(
    client: Client,
) -> None:
    environments = await Toolrt.sample_init("interrupted", None, {})
    sandbox = environments["default"]
    try:
        running = asyncio.create_task(sandbox.exec(["sh", "-c", "touch started; exec sleep 300"]))
        while not (await sandbox.exec(["test", "-e", "started"])).success:
            await asyncio.sleep(0.05)
        running.cancel()  # as inspect cancels a sample's task
        with pytest.raises(asyncio.CancelledError):
            await running
        processes = await sandbox.exec(["ps", "-eo", "args"])
        assert "sleep 300" not in processes.stdout
    finally:
        await Toolrt.sample_cleanup("interrupted", None, environments, interrupted=True)
    left = [s.id for s in client.list_sessions() if s.labels.get("inspect.task") == "interrupted"]
    assert not set(left) & open_ids(client)
