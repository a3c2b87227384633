"""The local backend: the real agent as a child process, no container.

For fast, realistic tests of everything above the sandbox (sessions, tools,
the gRPC server) on a host without a Docker engine. It is NOT isolation and
is never offered to users: no config key selects it; tests and development
code build it explicitly (`build_core(config, backend=LocalBackend(config))`).

Each sandbox is `unshare --mount --pid --net --uts --ipc --fork` running
local_root.py, which builds a private root (the host's system directories
read-only, tmpfs /workspace and /tmp, the agent package at its usual mount
point), chroots into it and execs the static agent the Docker backend
would mount as PID 1 of the new namespace.
So the agent's hard-coded /workspace, /tmp and sandbox uid never touch the
host's real paths, even when the tests run as root. The agent speaks its
frames over the child's stdin/stdout (no Docker headers); its stderr is
logged at debug level.

What Docker enforces and this backend does not: memory, cpus and pids
limits (there is no cgroup), seccomp, and the image (the host's own
/usr and /etc stand in for it; `spec.image` is ignored). The sizes of
/workspace and /tmp are enforced (they are tmpfs), the network is a fresh
namespace with only loopback, and the agent keeps only the SETUID, SETGID
and KILL capabilities, as in a container.

Needs root (unshare, mount, chroot): otherwise `create` raises
EngineUnavailable saying so.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import shutil
import sys
from pathlib import Path

import psutil

from runtime.config import Config
from runtime.constants import SANDBOX_GID, SANDBOX_UID
from runtime.errors import CallTimeout, EngineUnavailable, SandboxLost
from runtime.sandbox.agent_dir import require_static_agent
from runtime.sandbox.backend import (
    AGENT_DIR_IN_SANDBOX,
    ConnectedSandbox,
    SandboxBackend,
    SandboxSpec,
    agent_command,
    new_epoch,
    prepare_agent_dir,
)
from runtime.sandbox.framing import AgentConnection

log = logging.getLogger(__name__)

SETUP_SCRIPT = str(Path(__file__).with_name("local_root.py"))
UNSHARE = ("--mount", "--pid", "--net", "--uts", "--ipc", "--fork", "--propagation", "private")
# The environment the agent starts with, as a container of the default image gives it.
AGENT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "HOSTNAME": "sandbox",
    "PYTHONDONTWRITEBYTECODE": "1",
}
STDERR_LINES = 20
KILL_WAIT_S = 10.0


class PipeSource:
    """The agent's stdout: a raw frame stream (a framing.ByteSource)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    async def read(self) -> bytes:
        return await self._reader.read(1 << 20)


class LocalSandbox(ConnectedSandbox):
    """An agent child process and the connection to it."""

    def __init__(
        self, session_id: str, process: asyncio.subprocess.Process, connection: AgentConnection
    ) -> None:
        super().__init__(session_id, connection)
        self.process = process
        self.stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._stderr_task = asyncio.create_task(self._log_stderr(), name=f"stderr-{session_id}")

    async def _log_stderr(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.stderr.append(line)
            log.debug("agent %s stderr: %s", self.id, line[:500])

    async def kill(self) -> None:
        """SIGKILL the namespace's PID 1 (the agent), which takes everything
        in the namespace with it; then reap `unshare`."""
        self.close()
        with contextlib.suppress(psutil.Error):
            # psutil checks the pid still names the same process before it signals.
            for child in psutil.Process(self.process.pid).children():
                child.kill()
        try:
            await asyncio.wait_for(self.process.wait(), KILL_WAIT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        await asyncio.wait([self._stderr_task], timeout=1)


def python_mounts() -> list[str]:
    """Host directories a python3 inside needs (the python tool's
    interpreter): none when the host's /usr has one (it is in the new root
    already), else the daemon's own installation, mounted read-only at the
    same path."""
    if shutil.which("python3", path="/usr/local/bin:/usr/bin"):
        return []
    return [os.path.realpath(sys.base_prefix)]


class LocalBackend(SandboxBackend):
    def __init__(self, config: Config) -> None:
        self._config = config
        self._agent_dir = prepare_agent_dir()
        require_static_agent(self._agent_dir)
        self._extra = python_mounts()
        self._live: dict[str, LocalSandbox] = {}
        self._epoch = new_epoch()

    def _command(self, spec: SandboxSpec) -> list[str]:
        setup = {
            "workspace_bytes": spec.limits.workspace_bytes,
            "tmp_bytes": spec.limits.tmp_bytes,
            "uid": SANDBOX_UID,
            "gid": SANDBOX_GID,
            "agent_dir": self._agent_dir,
            "agent_mount": AGENT_DIR_IN_SANDBOX,
            "extra_read_only": self._extra,
            "argv": agent_command(),
            "env": {
                **AGENT_ENV,
                "TOOLRT_SPARE_SHELL": "1" if self._config.spare_shell else "0",
            },
        }
        return ["unshare", *UNSHARE, "--", sys.executable, "-I", SETUP_SCRIPT, json.dumps(setup)]

    async def create(self, spec: SandboxSpec) -> LocalSandbox:
        what = f"create local sandbox {spec.session_id}"
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            msg = f"{what}: the local backend needs root and util-linux's unshare"
            raise EngineUnavailable(msg)
        process = await asyncio.create_subprocess_exec(
            *self._command(spec),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            limit=1 << 22,
        )
        assert process.stdin is not None
        assert process.stdout is not None
        connection = AgentConnection(
            spec.session_id, PipeSource(process.stdout), process.stdin, self._epoch
        )
        connection.start()
        sandbox = LocalSandbox(spec.session_id, process, connection)
        self._live[spec.session_id] = sandbox
        try:
            await sandbox.agent.hello(self._config.create_timeout_s)
        except (SandboxLost, CallTimeout) as exc:
            await self.destroy(spec.session_id)
            why = "; ".join(sandbox.stderr) or "no output"
            msg = f"{what}: the agent did not start ({why})"
            raise EngineUnavailable(msg) from exc
        except BaseException:
            await asyncio.shield(self.destroy(spec.session_id))
            raise
        return sandbox

    async def destroy(self, sandbox_id: str) -> None:
        sandbox = self._live.pop(sandbox_id, None)
        if sandbox is not None:
            await sandbox.kill()

    async def list_owned(self) -> list[str]:
        return list(self._live)

    async def reap_owned(self) -> int:
        owned = list(self._live)
        await asyncio.gather(*(self.destroy(sid) for sid in owned))
        return len(owned)

    async def close(self) -> None:
        await self.reap_owned()
