"""Shared fixtures: a real daemon in-process, a client, and leak checks.

A daemon runs on one of three backends: "docker" (the real engine, the
default), "local" (the real agent as a child process, runtime/sandbox/local.py)
or "fake" (in memory, scripted, runtime/sandbox/fake.py). `daemon`, `client`
and `session` use the `sandbox_backend` fixture's; override or parametrize
it per module or test, or pass `backend=` to `make_daemon`.

Tests marked `docker` need a real engine and fail (never skip) without one.
They run under the engine's default OCI runtime, or the one named by
TOOLRT_TEST_RUNTIME (`make test-runsc` sets "runsc"); a test whose behaviour
legitimately differs under gVisor is marked `runc_only("why")` and skipped
there with its reason (DESIGN, platform notes).
Every daemon a test starts has its own instance name, labels its containers
`toolrt.test=1`, and its teardown fails the test if any container (or, on
the local backend, any agent process) is left.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from runtime.client import Client
from runtime.clock import REAL_CLOCK, Clock
from runtime.config import Config, load_config
from runtime.core import build_core
from runtime.sandbox.backend import SandboxBackend
from runtime.sandbox.fake import FakeBackend
from runtime.sandbox.local import LocalBackend
from runtime.server.app import Daemon
from runtime.tools.registry import Registry
from tests.helpers import TEST_RUNTIME, agent_processes, containers_of, under_gvisor

TEST_LABEL = "toolrt.test"
# The sandbox image test daemons use: another one (a recipe being changed)
# can be tried without retagging the default others are testing against.
IMAGE = os.environ.get("TOOLRT_TEST_IMAGE", "toolrt-sandbox:default")
# "local-static": the local backend running the static agent (config `agent`).
BACKENDS = ("docker", "local", "local-static", "fake")
# Test daemons' state directories, one per instance, removed when the run ends.
STATE_ROOT = tempfile.mkdtemp(prefix="toolrt-test-state-")
atexit.register(shutil.rmtree, STATE_ROOT, True)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"these tests need a Docker engine and none answers: {exc}")
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"the sandbox image {IMAGE} is missing: run `make image` (make test does)")
    yield client
    client.close()


@pytest.fixture(autouse=True)
def _engine_for_docker_tests(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("docker"):
        request.getfixturevalue("docker_client")
    marker = request.node.get_closest_marker("runc_only")
    if marker is not None and under_gvisor():
        pytest.skip(f"differs under gVisor: {marker.args[0] if marker.args else ''}")


def config_for_test(**overrides: Any) -> Config:
    instance = f"test-{uuid.uuid4().hex[:10]}"
    values: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "instance": instance,
        "extra_labels": {TEST_LABEL: "1"},
        "runtime": TEST_RUNTIME,
        "image": IMAGE,
        # Warm by default in production; off here unless a test asks, so test
        # daemons start no containers nobody uses.
        "pool_size": 0,
        # Each daemon its own state, and its sessions closed when it stops
        # (the leak checks expect that); restart tests ask for "keep".
        "state_dir": os.path.join(STATE_ROOT, instance),
        "shutdown": "close",
    }
    values.update(overrides)
    return load_config(None, values, environ={})


@dataclass
class RunningDaemon:
    daemon: Daemon
    target: str
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread

    @property
    def instance(self) -> str:
        return self.daemon.config.instance

    def run(self, coro: Any, timeout: float = 60) -> Any:
        """Run a coroutine on the daemon's own event loop."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self.thread.is_alive():
            self.run(self.daemon.stop(grace=2))
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(30)


def backend_named(name: str, config: Config) -> SandboxBackend | None:
    """The backend a test asked for by name (None: the daemon's own, Docker)."""
    if name not in BACKENDS:
        msg = f"backend {name!r}: expected one of {BACKENDS}"
        raise ValueError(msg)
    if name == "local":
        return LocalBackend(config)
    if name == "local-static":
        return LocalBackend(config.model_copy(update={"agent": "static"}))
    if name == "fake":
        return FakeBackend()
    return None


def start_daemon(
    config: Config,
    registry: Registry | None = None,
    backend: SandboxBackend | None = None,
    clock: Clock = REAL_CLOCK,
) -> RunningDaemon:
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, Any] = {}

    def main() -> None:
        asyncio.set_event_loop(loop)

        async def boot() -> None:
            try:
                daemon = Daemon(build_core(config, backend, registry, clock))
                await daemon.start()
                holder["daemon"] = daemon
            except BaseException as exc:  # noqa: BLE001 - reported to the test
                holder["error"] = exc
            ready.set()

        loop.create_task(boot())
        loop.run_forever()
        # As asyncio.run does: a daemon dropped without stopping (a crash
        # simulated) leaves no task of its own to be destroyed pending.
        leftover = asyncio.all_tasks(loop)
        for task in leftover:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    thread = threading.Thread(target=main, name=f"daemon-{config.instance}", daemon=True)
    thread.start()
    ready.wait(60)
    if "error" in holder:
        loop.call_soon_threadsafe(loop.stop)
        raise holder["error"]
    daemon = holder["daemon"]
    return RunningDaemon(daemon, f"127.0.0.1:{daemon.port}", loop, thread)


@pytest.fixture
def sandbox_backend() -> str:
    """The backend of `daemon`/`client`/`session` (and of `make_daemon` by default)."""
    return "docker"


@pytest.fixture
def make_daemon(request: pytest.FixtureRequest, sandbox_backend: str) -> Iterator[Any]:
    """Start daemons with config overrides; all stopped and leak-checked after."""
    started: list[tuple[RunningDaemon, str]] = []

    def make(
        registry: Registry | None = None,
        backend: str | None = None,
        clock: Clock = REAL_CLOCK,
        **overrides: Any,
    ) -> RunningDaemon:
        name = backend or sandbox_backend
        if name == "docker":
            request.getfixturevalue("docker_client")  # fails the test without an engine
        config = config_for_test(**overrides)
        running = start_daemon(config, registry, backend_named(name, config), clock)
        started.append((running, name))
        return running

    yield make
    leaked: list[str] = []
    for running, name in started:
        running.stop()
        if name == "docker":
            docker_client = request.getfixturevalue("docker_client")
            for container in containers_of(docker_client, running.instance):
                leaked.append(container.name)
                container.remove(force=True)
    for process in agent_processes():
        leaked.append(f"local sandbox pid {process.pid}")
        process.kill()
    if leaked:
        pytest.fail(f"sandboxes left behind after the daemon stopped: {leaked}")


@pytest.fixture
def instance(tmp_path: Path, docker_client: Any) -> Iterator[Any]:
    """start(): a daemon of one instance and state_dir (shutdown "keep"); all
    its containers are removed at the end."""
    name = f"test-restart-{uuid.uuid4().hex[:8]}"
    started: list[RunningDaemon] = []

    def start(**overrides: Any) -> RunningDaemon:
        values = {"instance": name, "state_dir": str(tmp_path), "shutdown": "keep"}
        values.update(overrides)
        running = start_daemon(config_for_test(**values))
        started.append(running)
        return running

    yield start
    for running in started:
        if running.thread.is_alive():
            running.stop()
    for container in containers_of(docker_client, name):
        container.remove(force=True)


@pytest.fixture
def daemon(make_daemon: Any) -> RunningDaemon:
    return make_daemon()  # type: ignore[no-any-return]


@pytest.fixture
def client(daemon: RunningDaemon) -> Iterator[Client]:
    with Client(daemon.target) as c:
        yield c


@pytest.fixture
def session(client: Client) -> Iterator[Any]:
    with client.session() as s:
        yield s
