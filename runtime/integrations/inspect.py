"""inspect_ai: the `toolrt` sandbox type, over the exec and file RPCs.

Installed with `toolrt[inspect]`, which registers this module in inspect's
`inspect_ai` entry point group: inspect imports it when a task asks for
`sandbox="toolrt"` or `sandbox=("toolrt", ToolrtSandboxConfig(...))`.

Each sample gets one toolrt session per environment it names (`default`
unless the config lists others), labelled `toolrt.integration=inspect` and
`inspect.task=<task>`; `sample_cleanup` closes them, `task_cleanup` closes
what a task left open and `inspect sandbox cleanup toolrt [id]` what any task
left. `exec` runs its argv directly (`Exec`), so `cmd[0]` is found in the
sandbox's `PATH` and nothing is quoted through a shell; files go through
`ReadFile`/`WriteFile`, relative paths under `/workspace` (the exec's default
cwd too). The daemon's refusals arrive as the built-in exceptions inspect
expects; past its timeout a command's whole process tree is killed and
`TimeoutError` raised.
"""

from __future__ import annotations

from typing import Any, Literal, overload

import grpc
from inspect_ai.util import (  # type: ignore[import-not-found,unused-ignore]
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    SandboxUserUnsupportedError,
    sandboxenv,
)
from pydantic import BaseModel, ConfigDict

from runtime.client.aio import TLS, AsyncClient, AsyncSession, ToolrtRpcError
from runtime.constants import INTEGRATION_LABEL

HARNESS = "inspect"
# The task a session belongs to, so that one task's cleanup leaves another's alone.
TASK_LABEL = "inspect.task"
# What a shell says of a program it cannot find; inspect wants it as a result, not a raise.
NOT_FOUND_EXIT = 127

__all__ = ["ToolrtLimits", "ToolrtSandboxConfig", "ToolrtSandboxEnvironment"]


class ToolrtLimits(BaseModel):
    """A session's `Limits` (unset: the daemon's default, within its ceilings)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_bytes: int | None = None
    cpus: float | None = None
    pids: int | None = None
    workspace_bytes: int | None = None
    tmp_bytes: int | None = None
    call_timeout_s: float | None = None
    max_calls: int | None = None
    output_cap_bytes: int | None = None


class ToolrtSandboxConfig(BaseModel):
    """The `toolrt` sandbox's config in a task: `sandbox=("toolrt", ToolrtSandboxConfig(...))`.

    Connection fields left empty come from `TOOLRT_TARGET`, `TOOLRT_TOKEN` and
    `TOOLRT_TLS_*`; session fields left empty take the daemon's defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str | None = None
    """The daemon, host:port."""
    token: str | None = None
    """Bearer token of the caller's tenant."""
    tls_ca: str = ""
    """PEM file of the CA that signed the daemon's certificate (any tls_* turns TLS on)."""
    tls_cert: str = ""
    """PEM file of the client certificate (mutual TLS)."""
    tls_key: str = ""
    """PEM file of the client certificate's key."""
    image: str = ""
    """Sandbox image (the daemon must allow it)."""
    runtime: str = ""
    """OCI runtime of the sandbox, e.g. `runsc` (the daemon must allow it)."""
    # Frozen all through: inspect keys its sandbox caches by the config's hash.
    limits: ToolrtLimits = ToolrtLimits()
    """The session's limits (a dict of `Limits` fields will do)."""
    network: tuple[str, ...] = ()
    """Egress allowlist (host or host:port patterns); empty: no network."""
    environments: tuple[str, ...] = ("default",)
    """Names of the sample's environments, one session each; the first is the default."""
    users: tuple[str, ...] = ()
    """Users `exec(user=...)` may name besides the sandbox user, asked of the
    daemon at creation (the tenant's `users` must grant them); others raise
    `SandboxUserUnsupportedError` without asking the daemon."""
    root_filesystem: Literal["", "read-only", "writable"] = ""
    """`writable` lets root install into the image (the tenant's `writable_root`
    must grant it, on runtime `runsc-overlay`); empty: the daemon's read-only root."""


def _config(config: SandboxEnvironmentConfigType | None) -> ToolrtSandboxConfig:
    if config is None:
        return ToolrtSandboxConfig()
    if isinstance(config, ToolrtSandboxConfig):
        return config
    msg = f"the toolrt sandbox takes a ToolrtSandboxConfig, not {config!r}"
    raise ValueError(msg)


def _client(config: ToolrtSandboxConfig) -> AsyncClient:
    """A client of the configured daemon (the `TOOLRT_*` variables fill what is unset)."""
    tls = None
    if config.tls_ca or config.tls_cert or config.tls_key:
        tls = TLS(ca_file=config.tls_ca, cert_file=config.tls_cert, key_file=config.tls_key)
    return AsyncClient(config.target, token=config.token, tls=tls)


def _session_fields(config: ToolrtSandboxConfig, task_name: str) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "labels": {INTEGRATION_LABEL: HARNESS, TASK_LABEL: task_name},
        "image": config.image,
        "runtime": config.runtime,
    }
    limits = config.limits.model_dump(exclude_none=True)
    if limits:
        fields["limits"] = limits
    if config.network:
        fields["network"] = {"allow": config.network}
    if config.users:
        fields["users"] = config.users
    if config.root_filesystem:
        fields["root_filesystem"] = config.root_filesystem
    return fields


async def _close_quietly(client: AsyncClient, session_id: str) -> None:
    """Close a session; one already gone is as good as closed."""
    try:
        await client.close_session(session_id)
    except ToolrtRpcError as exc:
        if exc.code != grpc.StatusCode.NOT_FOUND:
            raise


async def _close_labelled(client: AsyncClient, task_name: str | None) -> None:
    """Close the caller's open inspect sessions (of `task_name` when given)."""
    for s in await client.list_sessions():
        mine = s.labels.get(INTEGRATION_LABEL) == HARNESS and s.state == "ready"
        if mine and (task_name is None or s.labels.get(TASK_LABEL) == task_name):
            await _close_quietly(client, s.id)


def _decode(data: bytes) -> str:
    # Output is text to inspect; a stray byte must not lose the rest of it.
    return data.decode("utf-8", errors="replace")


@sandboxenv(name="toolrt")
class ToolrtSandboxEnvironment(SandboxEnvironment):  # type: ignore[misc,unused-ignore]
    """One toolrt session as one of a sample's inspect sandboxes."""

    def __init__(
        self, client: AsyncClient, session: AsyncSession, config: ToolrtSandboxConfig
    ) -> None:
        super().__init__()
        self.client = client
        self.session = session
        self.config = config

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return ToolrtSandboxConfig(**config)

    @classmethod
    async def sample_init(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        metadata: dict[str, str],
    ) -> dict[str, SandboxEnvironment]:
        settings = _config(config)
        client = _client(settings)
        fields = _session_fields(settings, task_name)
        opened: list[AsyncSession] = []
        try:
            for _ in settings.environments:
                opened.append(await client.session(**fields))
        except BaseException:
            # Half a sample is no sample: close what was opened before the failure.
            for session in opened:
                await _close_quietly(client, session.id)
            await client.close()
            raise
        return {
            name: cls(client, session, settings)
            for name, session in zip(settings.environments, opened, strict=True)
        }

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        clients = []
        for env in environments.values():
            if isinstance(env, ToolrtSandboxEnvironment):
                await _close_quietly(env.client, env.session.id)
                clients.append(env.client)
        for client in dict.fromkeys(clients):
            await client.close()

    @classmethod
    async def task_cleanup(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool
    ) -> None:
        if not cleanup:
            return
        async with _client(_config(config)) as client:
            await _close_labelled(client, task_name)

    @classmethod
    async def cli_cleanup(cls, id: str | None) -> None:
        """`inspect sandbox cleanup toolrt [id]`: that session, else every
        inspect session of the caller on the daemon `TOOLRT_*` names."""
        async with _client(ToolrtSandboxConfig()) as client:
            if id:
                await _close_quietly(client, id)
            else:
                await _close_labelled(client, None)

    def _check_user(self, user: str | None) -> str:
        if user and user not in self.config.users:
            msg = f"user {user!r} is not in this toolrt sandbox's users {list(self.config.users)}"
            raise SandboxUserUnsupportedError(msg)
        return user or ""

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        stdin = input.encode() if isinstance(input, str) else input
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        fields: dict[str, Any] = {"env": env or {}, "output_cap_bytes": limit}
        if cwd:
            fields["cwd"] = cwd
        if timeout:
            fields["timeout_s"] = float(timeout)
        try:
            result = await self.session.exec(
                cmd, stdin=stdin, user=self._check_user(user), **fields
            )
        except ToolrtRpcError as exc:
            if exc.reason == "USER_NOT_ALLOWED":
                raise SandboxUserUnsupportedError(exc.details) from exc
            if isinstance(exc, FileNotFoundError):
                # A program (or cwd) that is not there is the command's failure.
                return ExecResult(False, NOT_FOUND_EXIT, "", exc.details)
            raise
        if result.timed_out:
            msg = f"{cmd[0]} ran past its timeout of {timeout} s and was killed"
            raise TimeoutError(msg)
        if result.stdout_dropped_bytes or result.stderr_dropped_bytes:
            kept = result.stdout if result.stdout_dropped_bytes else result.stderr
            raise OutputLimitExceededError(
                SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR, _decode(kept)
            )
        return ExecResult(
            result.exit_code == 0,
            result.exit_code,
            _decode(result.stdout),
            _decode(result.stderr),
        )

    async def write_file(self, file: str, contents: str | bytes) -> None:
        data = contents.encode() if isinstance(contents, str) else contents
        await self.session.write_file_bytes(file, data, make_parents=True)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        limit = SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
        try:
            data = await self.session.read_file_bytes(file, max_bytes=limit)
        except ToolrtRpcError as exc:
            if exc.reason == "FILE_TOO_LARGE":
                raise OutputLimitExceededError(
                    SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, None
                ) from exc
            raise
        # Strict: inspect expects UnicodeDecodeError for a binary file read as text.
        return data.decode("utf-8") if text else data
