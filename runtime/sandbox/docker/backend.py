"""Sandboxes as hardened Docker containers, each running toolrt's agent.

The Docker SDK is synchronous: every SDK call runs on a dedicated thread
pool, under a deadline, never on the event loop. The per-call path touches
no Docker API at all: calls travel over the container's attach stream
(`framing.AgentConnection` over attach.py's stream), or under a root daemon
over the unix socket the agent dials (channel.py). Every Docker failure
becomes a toolrt error in errors.py, never here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import urlparse

import docker
from docker.types import LogConfig

from runtime.agent.protocol import RELAY_DIR
from runtime.config import Config, Limits
from runtime.constants import SANDBOX_GID, SANDBOX_UID, TMP, WORKSPACE, client_label
from runtime.errors import BadRequest, EngineUnavailable
from runtime.sandbox.agent_client import AgentClient
from runtime.sandbox.agent_dir import require_static_agent
from runtime.sandbox.backend import (
    AGENT_DIR_IN_SANDBOX,
    LABEL_DAEMON,
    LABEL_SESSION,
    LABEL_TENANT,
    Adopted,
    ConnectedSandbox,
    EngineInfo,
    SandboxBackend,
    SandboxSpec,
    Usage,
    agent_command,
    new_epoch,
    prepare_agent_dir,
)
from runtime.sandbox.docker import channel
from runtime.sandbox.docker.attach import DockerAttachSource, open_attach
from runtime.sandbox.docker.errors import (
    exited_by_itself,
    map_agent_start,
    map_docker_errors,
    map_engine_timeout,
    require_engine_socket,
    tolerate_gone,
)
from runtime.sandbox.docker.sdk import create_config, post_json
from runtime.sandbox.docker.stats import container_usage, engine_info
from runtime.sandbox.framing import AgentConnection
from runtime.sandbox.relay_dirs import (
    egress_enabled,
    make_relay_dir,
    remove_relay_dir,
    socket_path_problem,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

# Pinned rather than negotiated: negotiation costs a round trip per client
# and leaks a socket when the engine is down. Engines since 20.10 speak it.
DOCKER_API_VERSION = "1.41"
# Capabilities the agent needs to start commands as the sandbox user and to
# kill them; commands themselves end up with none.
AGENT_CAPS = ["SETUID", "SETGID", "KILL"]
# What root gets in a session whose tenant grants `root_capabilities`
# (enough for adduser and file ownership), added to the container's bounding
# set; the agent hands root exactly these, other sessions' root none.
ROOT_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID"]
# How long a re-attached agent has to answer the resync signal.
RESYNC_TIMEOUT_S = 10.0


def container_name(session_id: str) -> str:
    return f"toolrt-{session_id}"


def docker_socket_path(config: Config) -> str:
    host = config.docker_host or os.environ.get("DOCKER_HOST", "") or "unix:///var/run/docker.sock"
    parsed = urlparse(host)
    if parsed.scheme != "unix":
        msg = f"docker_host {host!r}: only unix:// engine sockets are supported"
        raise ValueError(msg)
    return parsed.path


class DockerBackend(SandboxBackend):
    def __init__(self, config: Config) -> None:
        if egress_enabled(config) and os.geteuid() != 0:
            msg = (
                "network.allow_max is set but the daemon does not run as root: the relay "
                "directories it mounts must belong to root, as the sandbox's agent (which "
                "has no DAC_OVERRIDE) is; run the daemon as root or leave network.allow_max empty"
            )
            raise ValueError(msg)
        self._config = config
        self._socket = docker_socket_path(config)
        self._executor = ThreadPoolExecutor(config.docker_workers, thread_name_prefix="docker")
        self._client: docker.DockerClient | None = None
        self._agent_dir = prepare_agent_dir(config.agent_dir)
        require_static_agent(self._agent_dir)
        # The agent dials its daemon on a socket in its relay directory,
        # which only a root daemon can make the sandbox's root (without
        # DAC_OVERRIDE) own; any other daemon keeps the stdio.
        self._channel = os.geteuid() == 0
        problem = socket_path_problem(config) if self._channel else ""
        if problem:
            raise ValueError(problem)
        self._live: dict[str, ConnectedSandbox] = {}
        self._epoch = new_epoch()

    # -- plumbing -----------------------------------------------------------
    def _docker(self) -> docker.DockerClient:
        if self._client is None:
            self._client = docker.DockerClient(
                base_url=f"unix://{self._socket}",
                version=DOCKER_API_VERSION,
                timeout=int(self._config.docker_timeout_s),
                max_pool_size=self._config.docker_workers,
            )
        return self._client

    async def _run(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        def guarded() -> T:
            require_engine_socket(what, self._socket)
            with map_docker_errors(what):
                return fn(*args)

        loop = asyncio.get_running_loop()
        with map_engine_timeout(what, self._config.docker_timeout_s):
            return await asyncio.wait_for(
                loop.run_in_executor(self._executor, guarded),
                self._config.docker_timeout_s + 5,
            )

    async def ping(self) -> None:
        await self._run("ping the engine", lambda: self._docker().ping())

    # -- lifecycle ----------------------------------------------------------
    def _labels(self, spec: SandboxSpec) -> dict[str, str]:
        # Operators may add their own toolrt.* labels (tests mark containers
        # toolrt.test); requests may not (but toolrt.integration), and nobody
        # overrides the three below.
        labels = dict(self._config.extra_labels)
        labels.update({k: v for k, v in spec.labels.items() if client_label(k)})
        labels[LABEL_SESSION] = spec.session_id
        labels[LABEL_DAEMON] = self._config.instance
        if spec.tenant:  # warm-pool containers have none yet
            labels[LABEL_TENANT] = spec.tenant
        return labels

    def _create_container(self, spec: SandboxSpec) -> str:
        limits = spec.limits
        tmpfs_opts = "rw,exec,nosuid,nodev"
        kwargs: dict[str, Any] = {
            "image": spec.image,
            "command": agent_command(channel=self._channel),
            "name": container_name(spec.session_id),
            "user": "0:0",
            "entrypoint": [],
            "stdin_open": not self._channel,
            "tty": False,
            "network_mode": "none",
            "cap_drop": ["ALL"],
            "cap_add": sorted({*AGENT_CAPS, *ROOT_CAPS}) if spec.root_capabilities else AGENT_CAPS,
            "security_opt": ["no-new-privileges"],
            # A writable root only on a runtime bounding it (sessions/grants.py).
            "read_only": not spec.writable_root,
            "tmpfs": {
                WORKSPACE: (
                    f"{tmpfs_opts},size={limits.workspace_bytes},"
                    f"uid={SANDBOX_UID},gid={SANDBOX_GID},mode=0755"
                ),
                TMP: (
                    f"{tmpfs_opts},size={limits.tmp_bytes},"
                    f"uid={SANDBOX_UID},gid={SANDBOX_GID},mode=1777"
                ),
            },
            "mem_limit": limits.memory_bytes,
            "memswap_limit": limits.memory_bytes,
            "nano_cpus": int(limits.cpus * 1e9),
            "pids_limit": limits.pids,
            "log_config": LogConfig(type="none"),
            "volumes": {self._agent_dir: {"bind": AGENT_DIR_IN_SANDBOX, "mode": "ro"}},
            "labels": self._labels(spec),
            "working_dir": WORKSPACE,
            "hostname": "sandbox",
            "environment": {
                "PYTHONDONTWRITEBYTECODE": "1",
                "TOOLRT_SPARE_SHELL": "1" if self._config.spare_shell else "0",
            },
        }
        if spec.runtime:
            kwargs["runtime"] = spec.runtime
        if egress_enabled(self._config) or self._channel:
            # Every container, warm ones too: a session is given network
            # after creation, by listening in this directory.
            relay = make_relay_dir(self._config, spec.session_id)
            kwargs["volumes"][relay] = {"bind": RELAY_DIR, "mode": "ro"}
        try:
            api = self._docker().api
            name, config = create_config(api, kwargs)
            # docker-py closes stdin when the attach ends (StdinOnce): the
            # agent must outlive its daemon, and a new daemon attach again.
            config["StdinOnce"] = False
            created = api.create_container_from_config(config, name)
        except BaseException:
            remove_relay_dir(self._config, spec.session_id)
            raise
        return str(created["Id"])

    def _connect(
        self,
        session_id: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        resync: bool,
    ) -> AgentConnection:
        connection = AgentConnection(
            session_id, channel.StreamSource(reader), writer, self._epoch, resync
        )
        connection.start()
        return connection

    async def _start_on_channel(
        self,
        container_id: str,
        session_id: str,
        what: str,
        ended_by_itself: Callable[[], Awaitable[bool]],
    ) -> AgentConnection:
        """Start the container and take its agent's first connection, telling
        it the channel's token; the hello is the caller's."""
        token = channel.new_token(self._config, session_id)
        path = channel.socket_path(self._config, session_id)
        async with channel.listening(path) as listener:
            await self._run(what, self._docker().api.start, container_id)
            timeout = self._config.create_timeout_s
            reader, writer = await listener.first(timeout, ended_by_itself)
        writer.write(channel.channel_frame(token))
        return self._connect(session_id, reader, writer, resync=False)

    async def _start_attached(
        self, container_id: str, session_id: str, what: str
    ) -> AgentConnection:
        """Attach to the container (before it starts: not a byte is missed), then start it."""
        connection = await self._attach(container_id, session_id, what)
        try:
            await self._run(what, self._docker().api.start, container_id)
        except BaseException:
            connection.close()
            raise
        return connection

    async def _redial(self, name: str, session_id: str, what: str) -> AgentConnection:
        """Listen again, signal the agent, and take the connection that
        presents the channel's token (root in the sandbox may dial too)."""
        token = channel.kept_token(self._config, session_id)
        if not token:
            msg = f"{what}: no channel token is kept for it (agents older than protocol version 7)"
            raise EngineUnavailable(msg)
        path = channel.socket_path(self._config, session_id)
        async with channel.listening(path, token) as listener:
            await self._run(what, self._docker().api.kill, name, "SIGUSR1")
            reader, writer = await listener.presenting(RESYNC_TIMEOUT_S)
        return self._connect(session_id, reader, writer, resync=True)

    async def _attach(
        self, container_id: str, session_id: str, what: str, resync: bool = False
    ) -> AgentConnection:
        reader, writer = await open_attach(
            self._socket, DOCKER_API_VERSION, container_id, what, self._config.docker_timeout_s
        )
        connection = AgentConnection(
            session_id, DockerAttachSource(reader, session_id), writer, self._epoch, resync
        )
        connection.start()
        return connection

    async def adopt(self, sandbox_id: str) -> Adopted:
        """Re-attach the running container a previous daemon left: attach,
        signal the agent to resync (SIGUSR1), then hello. Raises if the
        container is not running or its agent does not answer."""
        what = f"re-attach sandbox {sandbox_id}"
        name = container_name(sandbox_id)
        state = await self._run(what, lambda: self._docker().api.inspect_container(name)["State"])
        if not state.get("Running"):
            msg = f"{what}: its container is {state.get('Status', 'not running')}"
            raise EngineUnavailable(msg)
        timeout = self._config.create_timeout_s
        connection: AgentConnection | None = None
        try:
            try:
                if self._channel:
                    connection = await self._redial(name, sandbox_id, what)
                else:
                    connection = await self._attach(name, sandbox_id, what, resync=True)
                    await self._run(what, self._docker().api.kill, name, "SIGUSR1")
                await connection.resynced(RESYNC_TIMEOUT_S)
            except TimeoutError:
                msg = (
                    f"{what}: its agent did not resync within {RESYNC_TIMEOUT_S:g} s (agents "
                    "older than protocol version 4 cannot be re-adopted)"
                )
                raise EngineUnavailable(msg) from None
            hello = await AgentClient(connection).hello(timeout)
        except BaseException:
            if connection is not None:
                connection.close()
            raise
        sandbox = ConnectedSandbox(sandbox_id, connection)
        self._live[sandbox_id] = sandbox
        return Adopted(sandbox, hello)

    async def create(self, spec: SandboxSpec) -> ConnectedSandbox:
        what = f"create sandbox {spec.session_id}"
        container_id = await self._run(what, self._create_container, spec)
        connection: AgentConnection | None = None

        async def ended_by_itself() -> bool:
            return await self._run(what, self._exited_by_itself, container_id)

        timeout = self._config.create_timeout_s
        try:
            async with map_agent_start(what, spec.image, timeout, ended_by_itself):
                if self._channel:
                    connection = await self._start_on_channel(
                        container_id, spec.session_id, what, ended_by_itself
                    )
                else:
                    connection = await self._start_attached(container_id, spec.session_id, what)
                await AgentClient(connection).hello(timeout)
        except BaseException:
            if connection is not None:
                connection.close()
            await asyncio.shield(self._remove(spec.session_id))
            raise
        sandbox = ConnectedSandbox(spec.session_id, connection)
        self._live[spec.session_id] = sandbox
        return sandbox

    def _exited_by_itself(self, container_id: str) -> bool:
        """Did the container end on its own (a removed one did not)?"""
        state: dict[str, Any] | None = None
        with tolerate_gone():
            state = self._docker().api.inspect_container(container_id)["State"]
        return state is not None and exited_by_itself(state)

    def _remove_container(self, session_id: str) -> None:
        name = container_name(session_id)
        with tolerate_gone() as removal:
            self._docker().api.remove_container(name, force=True, v=True)
        remove_relay_dir(self._config, session_id)
        channel.remove_token(self._config, session_id)
        if not removal.in_progress:
            return
        # A removal already in progress (a reaper and a close at once) is
        # someone else's, but "gone when destroy returns" is ours: wait for it.
        deadline = time.monotonic() + self._config.docker_timeout_s
        while time.monotonic() < deadline:
            with tolerate_gone():
                self._docker().api.inspect_container(name)
                time.sleep(0.05)
                continue
            return

    async def _remove(self, session_id: str) -> None:
        with contextlib.suppress(EngineUnavailable, BadRequest):
            await self._run(f"remove sandbox {session_id}", self._remove_container, session_id)

    async def destroy(self, sandbox_id: str) -> None:
        sandbox = self._live.pop(sandbox_id, None)
        if sandbox is not None:
            sandbox.close()
        await self._run(f"remove sandbox {sandbox_id}", self._remove_container, sandbox_id)

    def _update_container(self, session_id: str, limits: Limits) -> None:
        # The SDK's update_container knows neither NanoCpus nor PidsLimit.
        api = self._docker().api
        data = {
            "Memory": limits.memory_bytes,
            "MemorySwap": limits.memory_bytes,
            "NanoCpus": int(limits.cpus * 1e9),
            "PidsLimit": limits.pids,
        }
        post_json(api, "/containers/{0}/update", container_name(session_id), data=data)

    async def update_limits(self, sandbox_id: str, limits: Limits) -> None:
        """Set memory, cpus and pids of a live sandbox (a claimed warm one)."""
        await self._run(f"update sandbox {sandbox_id}", self._update_container, sandbox_id, limits)

    async def describe_engine(self) -> EngineInfo:
        return await self._run(
            "describe the engine", engine_info, self._docker(), self._config.runtime
        )

    async def usage(self, sandbox_id: str) -> Usage:
        name = container_name(sandbox_id)
        return await self._run(f"read usage of {sandbox_id}", container_usage, self._docker(), name)

    def _owned(self) -> list[str]:
        containers = self._docker().api.containers(
            all=True, filters={"label": f"{LABEL_DAEMON}={self._config.instance}"}
        )
        return [c["Labels"].get(LABEL_SESSION, "") for c in containers]

    async def list_owned(self) -> list[str]:
        return await self._run("list sandboxes", self._owned)

    async def remove_labelled(self, key: str, keep: Callable[[dict[str, str]], bool]) -> int:
        """Remove the containers of any instance that carry label `key` and
        that `keep(labels)` refuses (e.g. those of MCP fronts that are gone)."""

        def remove() -> int:
            api = self._docker().api
            found = api.containers(all=True, filters={"label": key})
            doomed = [c["Id"] for c in found if not keep(c.get("Labels") or {})]
            for container_id in doomed:
                with tolerate_gone():
                    api.remove_container(container_id, force=True, v=True)
            return len(doomed)

        return await self._run(f"remove containers labelled {key}", remove)

    async def reap_owned(self) -> int:
        owned = [sid for sid in await self.list_owned() if sid]
        await asyncio.gather(*(self.destroy(sid) for sid in owned), return_exceptions=True)
        return len(owned)

    async def close(self) -> None:
        for sandbox in self._live.values():
            sandbox.close()
        self._live.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._client is not None:
            self._client.close()
