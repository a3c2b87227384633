"""Run by `.venv-integrations/bin/python -m bench.harness_runner ROUNDS LABEL`
(bench/harnesses.py does): each harness's "create sandbox -> first command's
result" through its own API, on toolrt (the daemon of `TOOLRT_TARGET`) and on
the harness's own Docker sandbox (the local image, no network), the four
alternating each round. Prints {"name": [seconds, ...]} as one JSON line.

The Docker sandboxes carry the label LABEL (`toolrt.daemon=<bench daemon>`),
so the bench's clean-up finds any left.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import docker
from agents.sandbox.sandboxes.docker import DockerSandboxClient, DockerSandboxClientOptions
from minisweagent.environments.docker import DockerEnvironment

from runtime.integrations.minisweagent import ToolrtEnvironment
from runtime.integrations.openai_agents import ToolrtSandboxClient, ToolrtSandboxClientOptions

IMAGE = "toolrt-sandbox:default"


async def agents_first_command(client: Any, options: Any) -> float:
    """SandboxClient.create, start, exec("true") to its result; then delete (not timed)."""
    start = time.perf_counter()
    session = await client.create(options=options)
    try:
        await session.start()
        result = await session.exec("true")
        elapsed = time.perf_counter() - start
        assert result.exit_code == 0, result
    finally:
        await client.delete(session)
    return elapsed


def mini_first_command(make: Callable[[], Any]) -> float:
    """Environment built, execute({"command": "true"}) to its result; then cleaned up."""
    start = time.perf_counter()
    env = make()
    try:
        output = env.execute({"command": "true"})
        elapsed = time.perf_counter() - start
        assert output["returncode"] == 0, output
    finally:
        env.cleanup()
    return elapsed


async def main(rounds: int, label: str) -> dict[str, list[float]]:
    key, value = label.split("=", 1)
    engine = docker.from_env()
    agents_toolrt = ToolrtSandboxClient()
    agents_docker = DockerSandboxClient(engine)
    docker_options = DockerSandboxClientOptions(
        image=IMAGE, network_mode="none", labels={key: value}
    )
    run_args = ["--rm", "--network", "none", "--label", label]
    times: dict[str, list[float]] = {
        "agents_toolrt": [],
        "agents_docker": [],
        "mini_toolrt": [],
        "mini_docker": [],
    }
    for _ in range(rounds):
        times["agents_toolrt"].append(
            await agents_first_command(agents_toolrt, ToolrtSandboxClientOptions())
        )
        times["agents_docker"].append(await agents_first_command(agents_docker, docker_options))
        times["mini_toolrt"].append(mini_first_command(ToolrtEnvironment))
        times["mini_docker"].append(
            mini_first_command(lambda: DockerEnvironment(image=IMAGE, run_args=run_args))
        )
    engine.close()
    return times


if __name__ == "__main__":
    found = asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
    print(json.dumps(found))
