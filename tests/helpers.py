"""Helpers shared by the unit and Docker suites (no fixtures: those are in conftest.py)."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import io
import os
import socket
import stat
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import docker
import grpc
import psutil
import pytest
from _pytest.mark.structures import ParameterSet

from runtime.client import Client, ToolrtRpcError
from runtime.config import Config, Limits
from runtime.sandbox.backend import ConnectedSandbox, SandboxSpec
from runtime.sandbox.local import LocalBackend

# The OCI runtime of every sandbox the Docker tests start ("" = the engine's default).
TEST_RUNTIME = os.environ.get("TOOLRT_TEST_RUNTIME", "")
# The variable the spare shell reads its go byte into: it names the waiting shell in ps.
SPARE_MARK = "__toolrt_g"


def under_gvisor() -> bool:
    return TEST_RUNTIME == "runsc"


def containers_of(client: docker.DockerClient, instance: str) -> list[Any]:
    filters = {"label": f"toolrt.daemon={instance}"}
    for _ in range(10):
        try:
            return client.containers.list(all=True, filters=filters)
        except docker.errors.NotFound:
            # Listed, then removed before the SDK inspected it: list again.
            time.sleep(0.05)
    return client.containers.list(all=True, filters=filters)


def agent_processes() -> list[psutil.Process]:
    """Local-backend sandboxes of this test process still running."""
    children = psutil.Process(os.getpid()).children(recursive=True)
    return [p for p in children if p.name() == "unshare"]


def sandbox_processes(docker_client, session_id: str) -> list[list[str]]:
    """The sandbox's processes as [pid, ppid, user, args]. Under runc as the
    host sees them (`docker top`: host pids and user names); under gVisor
    `docker top` names host processes that share the sandbox's pids, so
    they are asked for inside (sandbox pids), the asking `ps` left out."""
    container = docker_client.containers.get(f"toolrt-{session_id}")
    columns = "-eo pid,ppid,user,args"
    if not under_gvisor():
        return [[*p[:3], " ".join(p[3:])] for p in container.top(ps_args=columns)["Processes"]]
    code, out = container.exec_run(["ps", *columns.split(), "--no-headers"], user="0")
    assert code == 0, out
    rows = [line.split(None, 3) for line in out.decode().splitlines()]
    return [row for row in rows if len(row) == 4 and not row[3].startswith("ps -eo ")]


def user_processes(docker_client, session_id: str) -> list[str]:
    """Commands of processes in the sandbox other than the agent itself and
    the shell it started ahead for the next call (the spare shell, which
    waits reading its go byte into SPARE_MARK)."""
    return [
        p[3]
        for p in sandbox_processes(docker_client, session_id)
        if "/opt/toolrt/" not in " ".join(p) and SPARE_MARK not in " ".join(p)
    ]


def make_tar(*members: tuple[str, str, object], gz: bool = False) -> bytes:
    """members: (name, kind, payload) with kind file/dir/symlink/hardlink/chr/fifo/setuid."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if gz else "w") as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            info.mode = 0o644
            data = b""
            if kind in ("file", "setuid"):
                data = payload if isinstance(payload, bytes) else str(payload).encode()
                info.size = len(data)
                if kind == "setuid":
                    info.mode = 0o755 | stat.S_ISUID
            elif kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, str(payload)
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, str(payload)
            elif kind == "chr":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            tar.addfile(info, io.BytesIO(data) if data else None)
    return buffer.getvalue()


APPEND = "echo line >> /workspace/log"


def lines(session) -> int:
    result = session.shell("cat /workspace/log 2>/dev/null | wc -l")
    assert result.ok
    return int(result.output["stdout"])


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail("condition not reached in time")


def is_open(client: Client, session_id: str) -> bool:
    """Ready (a closed session is remembered for an hour, state "closed")."""
    try:
        return client.get_session(session_id).state == "ready"
    except ToolrtRpcError as exc:
        if exc.code != grpc.StatusCode.NOT_FOUND:
            raise
        return False


# -- the daemon as a separate process ---------------------------------------------


def serve_command(
    instance: str, target: str, state_dir: Any, shutdown: str = "close"
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of `toolrt serve` on `target` (no warm pool)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRT_")}
    env["TOOLRT_POOL_SIZE"] = "0"  # warm by default; these tests count containers
    env["TOOLRT_STATE_DIR"] = str(state_dir)
    env["TOOLRT_SHUTDOWN"] = shutdown
    argv = [sys.executable, "-m", "runtime", "serve", "--listen", target, "--instance", instance]
    return argv, env


class DaemonProcess:
    """`toolrt serve` in a child process, its log in a file."""

    def __init__(
        self,
        instance: str,
        port: int,
        log_path,
        state_dir=None,
        shutdown: str = "close",
        config=None,
        nofile: int | None = None,
        env: dict[str, str] | None = None,
        cwd=None,
    ) -> None:
        """`config`: a TOML file; `nofile`: the daemon's RLIMIT_NOFILE (soft and
        hard); `env`: variables set over the daemon's environment; `cwd`: its directory."""
        self.target = f"127.0.0.1:{port}"
        self.log_path = log_path
        state_dir = state_dir or log_path.parent / "state"
        argv, environment = serve_command(instance, self.target, state_dir, shutdown)
        with open(log_path, "ab") as log:
            limit = ["prlimit", f"--nofile={nofile}:{nofile}", "--"] if nofile else []
            extra = ["--config", str(config)] if config else []
            self.proc = subprocess.Popen(
                [*limit, *argv, *extra],
                env={**environment, **(env or {})},
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        channel = grpc.insecure_channel(self.target)
        try:
            grpc.channel_ready_future(channel).result(timeout=30)
        except grpc.FutureTimeoutError:
            self.kill()  # a daemon that refused to start says why in its log
            msg = f"toolrt serve did not answer within 30 s: {self.log()[-3000:]}"
            raise AssertionError(msg) from None
        finally:
            channel.close()

    def log(self) -> str:
        return self.log_path.read_text()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- clocks, streams and sandboxes without a daemon ---------------------------------
class ManualClock:
    """A clock that moves only when a test says so (`now`, or `advance`): as a
    callable for the modules that take one, or as the daemon's `Clock`."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        # Polled: the test moves the clock from its own thread.
        deadline = self.now + seconds
        while self.now < deadline:
            await asyncio.sleep(0.005)

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Pipe:
    """An in-memory byte stream: what the daemon writes, what the agent answers."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.replies: asyncio.Queue[bytes] = asyncio.Queue()

    def write(self, data: bytes) -> None:
        self.written.append(data)

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        self.replies.put_nowait(b"")

    async def read(self) -> bytes:
        return await self.replies.get()


BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/workspace"}


def spec(**limits: Any) -> SandboxSpec:
    return SandboxSpec(session_id=uuid.uuid4().hex, image="ignored", limits=Limits(**limits))


def with_sandbox(
    test: Callable[[LocalBackend, ConnectedSandbox], Awaitable[None]],
    **limits: Any,
) -> None:
    async def run() -> None:
        backend = LocalBackend(Config())
        try:
            await test(backend, await backend.create(spec(**limits)))
        finally:
            await backend.close()

    asyncio.run(run())
    assert agent_processes() == []


def toolrt(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRT_")}
    return subprocess.run(
        [sys.executable, "-m", "runtime", *args],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=60,
        check=False,
    )


# -- a checkout as a user gets it -------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]


def copy_tracked_tree(dest: Path) -> None:
    """What a fresh clone holds (the floors check's copy: no stale build/ inside)."""
    path = ROOT / "scripts" / "check_floors.py"
    spec = importlib.util.spec_from_file_location("check_floors", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.copy_tracked_tree(dest)


def run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300):
    done = subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done


# -- a session's egress proxy, driven without a sandbox ----------------------------
async def resolve_to_loopback(host: str, port: int) -> list[str]:
    return ["127.0.0.1"]


async def exchange(path: str, data: bytes, wait: float = 5) -> bytes:
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), wait)
    finally:
        writer.close()


# -- another agent held to a test module's checks ------------------------------
def cases_of(check: Callable[..., Any]) -> list[dict[str, Any]]:
    """The arguments a check's own `pytest.mark.parametrize` gives it, one
    dict per case ([{}] when it has none)."""
    cases: list[dict[str, Any]] = [{}]
    for mark in getattr(check, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names = (
            [n.strip() for n in mark.args[0].split(",")]
            if isinstance(mark.args[0], str)
            else list(mark.args[0])
        )
        values = [
            tuple(raw.values)
            if isinstance(raw, ParameterSet)
            else (raw,)
            if len(names) == 1
            else raw
            for raw in mark.args[1]
        ]
        cases = [{**case, **dict(zip(names, v, strict=True))} for case in cases for v in values]
    return cases


def run_check(check: Callable[..., Any], **given: Any) -> Any:
    """Call a test module's check with the fixtures it names, taken from `given`."""
    return check(**{name: given[name] for name in inspect.signature(check).parameters})


# Whether this call's shell was a spare: its boot line names __toolrt_g
# (which this line, a shell's `-c` when it is not, does not spell out).
# With the shell's builtins and cat alone.
IN_A_SPARE = 'case "$(cat /proc/$$/cmdline)" in *__toolrt_[g]*) echo spare;; *) echo own;; esac'


def shell_after_a_pause(client, session) -> str:
    """ "spare" or "own": which shell a call got after the session was idle
    long enough for its next shell to start ahead."""
    assert client.call(session.id, "shell", {"command": "true"}, timeout=60).ok
    time.sleep(1.5)
    seen = client.call(session.id, "shell", {"command": IN_A_SPARE}, timeout=60)
    assert seen.ok and seen.output["exit_code"] == 0, seen
    return str(seen.output["stdout"]).strip()
