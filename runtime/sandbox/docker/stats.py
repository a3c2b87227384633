"""What the engine says about itself and about one container, for the Admin* RPCs.

Blocking Docker SDK calls: the backend runs them on its thread pool.
"""

from __future__ import annotations

from typing import Any

import docker

from runtime.sandbox.backend import EngineInfo, Usage


def engine_info(client: docker.DockerClient, runtime: str) -> EngineInfo:
    """`docker <version>` and the runtime new sandboxes get (ours, else the engine's default)."""
    info: dict[str, Any] = client.info()
    details = [f"cgroup v{info.get('CgroupVersion') or '1'}", str(info.get("Driver") or "")]
    name = f"docker {info.get('ServerVersion', '?')} ({', '.join(d for d in details if d)})"
    return EngineInfo(name, runtime or str(info.get("DefaultRuntime") or ""))


def container_usage(client: docker.DockerClient, name: str) -> Usage:
    """CPU seconds so far, and memory in use less inactive page cache (as `docker stats`)."""
    stats: dict[str, Any] = client.api.stats(name, stream=False, one_shot=True)
    cpu = stats.get("cpu_stats", {}).get("cpu_usage", {}).get("total_usage", 0) / 1e9
    memory = stats.get("memory_stats", {})
    detail = memory.get("stats", {})
    inactive = detail.get("total_inactive_file", detail.get("inactive_file", 0))
    return Usage(cpu, max(0, int(memory.get("usage", 0)) - int(inactive)))
