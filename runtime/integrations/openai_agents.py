"""The OpenAI Agents SDK: `ToolrtSandboxClient`, a sandbox client for `SandboxAgent`.

Pass `SandboxRunConfig(client=ToolrtSandboxClient(), options=ToolrtSandboxClientOptions())`
to `Runner.run` (the runner creates, stops and deletes a session), or a session
of your own as `SandboxRunConfig(session=...)` (the runner leaves it to you:
`await client.delete(session)`). Each SDK session is one toolrt session,
labelled `toolrt.integration=openai-agents`, on the daemon the `TOOLRT_*`
variables name.

- Commands run through the `Exec` RPC: bytes in and out, killed at their
  timeout (`ExecTimeoutError`). The SDK's `user` on exec, read and write is
  toolrt's `user`: one of the `users` the options list (the session is opened
  with them, the tenant must grant them), else `USER_NOT_ALLOWED`. Files go
  through `ReadFile`/`WriteFile`.
- `resume(state)` attaches to the toolrt session the state names while it is
  open (toolrt sessions outlive the harness's process); when it is gone, a new
  one is opened and the SDK hydrates it from the state's snapshot.
- Workspace persist and hydrate are tar streams (`tar -c`/`tar -x` through
  `Exec`), not toolrt snapshots: the SDK keeps the bytes in its own snapshot
  store (local files by default) to rebuild a workspace on any backend, and a
  toolrt snapshot never leaves the daemon.
- Terminals: `supports_pty` is true, so the model's `exec_command` may come
  back still running and it gets `write_stdin` (openai_agents_pty.py, over
  `Exec` with `tty`). No exposed ports: `resolve_exposed_port` raises the
  SDK's `ExposedPortUnavailableError`.
"""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from typing import Any, Literal

import grpc
from agents.sandbox.errors import (  # type: ignore[import-not-found,unused-ignore]
    ExecTimeoutError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
)
from agents.sandbox.manifest import Manifest  # type: ignore[import-not-found,unused-ignore]
from agents.sandbox.session import (  # type: ignore[import-not-found,unused-ignore]
    BaseSandboxClient,
    BaseSandboxClientOptions,
    BaseSandboxSession,
    SandboxSession,
    SandboxSessionState,
)
from agents.sandbox.session.pty_types import (  # type: ignore[import-not-found,unused-ignore]
    PtyExecUpdate,
)
from agents.sandbox.snapshot import (  # type: ignore[import-not-found,unused-ignore]
    SnapshotBase,
    SnapshotSpec,
    resolve_snapshot,
)
from agents.sandbox.types import ExecResult, User  # type: ignore[import-not-found,unused-ignore]
from pydantic import Field

from runtime.client import ToolrtRpcError
from runtime.client.aio import AsyncClient
from runtime.constants import INTEGRATION_LABEL
from runtime.integrations.connection import READY, async_client_from_env
from runtime.integrations.openai_agents_pty import Terminals, transport_error

HARNESS = "openai-agents"
BACKEND = "toolrt"

__all__ = [
    "ToolrtSandboxClient",
    "ToolrtSandboxClientOptions",
    "ToolrtSandboxSession",
    "ToolrtSandboxSessionState",
]


class ToolrtSandboxClientOptions(BaseSandboxClientOptions):  # type: ignore[misc,unused-ignore]
    """What a new toolrt session is opened with."""

    type: Literal["toolrt"] = "toolrt"
    # The daemon's default image when empty.
    image: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    # Users besides the sandbox user that exec, read and write may name (e.g. "root").
    users: tuple[str, ...] = ()
    # Accepted for the SDK's sake; resolving any of them raises "unavailable".
    exposed_ports: tuple[int, ...] = ()


class ToolrtSandboxSessionState(SandboxSessionState):  # type: ignore[misc,unused-ignore]
    """The SDK's serializable state, naming the toolrt session to resume."""

    type: Literal["toolrt"] = "toolrt"
    toolrt_session_id: str = ""
    image: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    users: tuple[str, ...] = ()


def _user_name(user: str | User | None) -> str:
    if isinstance(user, User):
        return str(user.name)
    return user or ""


class ToolrtSandboxSession(BaseSandboxSession):  # type: ignore[misc,unused-ignore]
    """One toolrt session as the SDK's sandbox session."""

    state: ToolrtSandboxSessionState

    def __init__(self, *, state: ToolrtSandboxSessionState, client: AsyncClient) -> None:
        self.state = state
        self._client = client
        self._terminals = Terminals()

    def supports_pty(self) -> bool:
        return True

    async def pty_exec_start(
        self,
        *command: str | Path,
        timeout: float | None = None,
        shell: bool | list[str] = True,
        user: str | User | None = None,
        tty: bool = False,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        argv = self._prepare_exec_command(*command, shell=shell, user=None)
        return await self._terminals.start(
            self._client,
            self.state.toolrt_session_id,
            [str(part) for part in argv],
            tty=tty,
            user=_user_name(user),
            timeout=timeout,
            yield_time_s=yield_time_s,
            max_output_tokens=max_output_tokens,
        )

    async def pty_write_stdin(
        self,
        *,
        session_id: int,
        chars: str,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        return await self._terminals.write(session_id, chars, yield_time_s, max_output_tokens)

    async def pty_terminate_all(self) -> None:
        await self._terminals.terminate_all()

    async def exec(
        self,
        *command: str | Path,
        timeout: float | None = None,
        shell: bool | list[str] = True,
        user: str | User | None = None,
    ) -> ExecResult:
        # The user travels in the request, not as a `sudo` prefix: toolrt decides who may run.
        argv = self._prepare_exec_command(*command, shell=shell, user=None)
        return await self._run(argv, timeout, _user_name(user))

    async def _exec_internal(
        self, *command: str | Path, timeout: float | None = None
    ) -> ExecResult:
        return await self._run([str(part) for part in command], timeout, "")

    async def _run(
        self, argv: list[str], timeout: float | None, user: str, stdin: bytes | None = None
    ) -> ExecResult:
        fields: dict[str, Any] = {"user": user}
        if timeout:
            fields["timeout_s"] = timeout
        try:
            result = await self._client.exec(
                self.state.toolrt_session_id, argv, stdin=stdin, **fields
            )
        except TimeoutError as exc:
            raise ExecTimeoutError(command=argv, timeout_s=timeout, cause=exc) from exc
        except ToolrtRpcError as exc:
            raise transport_error(argv, exc) from exc
        if result.timed_out:
            raise ExecTimeoutError(command=argv, timeout_s=timeout)
        return ExecResult(stdout=result.stdout, stderr=result.stderr, exit_code=result.exit_code)

    async def read(self, path: Path, *, user: str | User | None = None) -> io.IOBase:
        target = await self._validate_path_access(path)
        try:
            data = await self._client.read_file_bytes(
                self.state.toolrt_session_id, target.as_posix(), user=_user_name(user)
            )
        except FileNotFoundError as exc:
            raise WorkspaceReadNotFoundError(path=path, cause=exc) from exc
        except ToolrtRpcError as exc:
            raise WorkspaceArchiveReadError(path=path, cause=exc) from exc
        return io.BytesIO(data)

    async def write(self, path: Path, data: io.IOBase, *, user: str | User | None = None) -> None:
        target = await self._validate_path_access(path, for_write=True)
        payload = data.read()
        blob = payload.encode() if isinstance(payload, str) else bytes(payload)
        try:
            await self._client.write_file_bytes(
                self.state.toolrt_session_id,
                target.as_posix(),
                blob,
                make_parents=True,
                user=_user_name(user),
            )
        except ToolrtRpcError as exc:
            raise WorkspaceArchiveWriteError(path=path, cause=exc) from exc

    async def running(self) -> bool:
        try:
            info = await self._client.get_session(self.state.toolrt_session_id)
        except ToolrtRpcError:
            return False
        return bool(info.state == READY)

    async def persist_workspace(self) -> io.IOBase:
        root = self._workspace_root_path()
        skipped = [
            f"--exclude=./{rel.as_posix()}" for rel in self._persist_workspace_skip_relpaths()
        ]
        argv = ["tar", "-c", "-C", root.as_posix(), *skipped, "."]
        result = await self._client.exec(self.state.toolrt_session_id, argv)
        if result.exit_code != 0 or result.stdout_dropped_bytes:
            context = {"stderr": result.stderr.decode(errors="replace")}
            raise WorkspaceArchiveReadError(path=root, context=context)
        return io.BytesIO(result.stdout)

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        root = self._workspace_root_path()
        payload = data.read()
        blob = payload.encode() if isinstance(payload, str) else bytes(payload)
        argv = ["sh", "-c", 'mkdir -p "$1" && tar -x -C "$1"', "sh", root.as_posix()]
        result = await self._client.exec(self.state.toolrt_session_id, argv, stdin=blob)
        if result.exit_code != 0:
            context = {"stderr": result.stderr.decode(errors="replace")}
            raise WorkspaceArchiveWriteError(path=root, context=context)


class ToolrtSandboxClient(BaseSandboxClient[ToolrtSandboxClientOptions]):  # type: ignore[misc,unused-ignore]
    """Creates, resumes and deletes toolrt sessions for `SandboxAgent` runs."""

    backend_id = BACKEND
    supports_default_options = True

    def __init__(self, client: AsyncClient | None = None) -> None:
        # Opened on first use: a grpc.aio channel belongs to the loop it is first used in.
        self._client = client

    @property
    def toolrt(self) -> AsyncClient:
        """The daemon's async client (from the `TOOLRT_*` variables unless given)."""
        if self._client is None:
            self._client = async_client_from_env()
        return self._client

    async def _open(self, state: ToolrtSandboxSessionState) -> str:
        labels = {**state.labels, INTEGRATION_LABEL: HARNESS}
        fields: dict[str, object] = {"labels": labels, "users": list(state.users)}
        if state.image:
            fields["image"] = state.image
        return str((await self.toolrt.create_session(**fields)).id)

    async def create(
        self,
        *,
        snapshot: SnapshotSpec | SnapshotBase | None = None,
        manifest: Manifest | None = None,
        options: ToolrtSandboxClientOptions | None = None,
    ) -> SandboxSession:
        options = options or ToolrtSandboxClientOptions()
        manifest = self._validate_manifest_for_create(manifest or Manifest())
        session_id = uuid.uuid4()
        state = ToolrtSandboxSessionState(
            session_id=session_id,
            manifest=manifest,
            snapshot=resolve_snapshot(snapshot, str(session_id)),
            exposed_ports=options.exposed_ports,
            image=options.image,
            labels=options.labels,
            users=options.users,
        )
        state.toolrt_session_id = await self._open(state)
        inner = ToolrtSandboxSession(state=state, client=self.toolrt)
        return self._wrap_session(inner)

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        if not isinstance(state, ToolrtSandboxSessionState):
            msg = "ToolrtSandboxClient.resume expects a ToolrtSandboxSessionState"
            raise TypeError(msg)
        alive = False
        try:
            info = await self.toolrt.get_session(state.toolrt_session_id)
            alive = info.state == READY
        except ToolrtRpcError as exc:
            if exc.code != grpc.StatusCode.NOT_FOUND:
                raise
        if not alive:
            # Gone: a new session, which the SDK's start hydrates from the state's snapshot.
            state.toolrt_session_id = await self._open(state)
            state.workspace_root_ready = False
        inner = ToolrtSandboxSession(state=state, client=self.toolrt)
        inner._set_start_state_preserved(alive)
        return self._wrap_session(inner)

    async def delete(self, session: SandboxSession) -> SandboxSession:
        inner = session._inner
        if not isinstance(inner, ToolrtSandboxSession):
            msg = "ToolrtSandboxClient.delete expects a ToolrtSandboxSession"
            raise TypeError(msg)
        try:
            await self.toolrt.close_session(inner.state.toolrt_session_id)
        except ToolrtRpcError as exc:
            # Gone already is as good as closed.
            if exc.code != grpc.StatusCode.NOT_FOUND:
                raise
        return session

    def deserialize_session_state(self, payload: dict[str, object]) -> SandboxSessionState:
        return self._deserialize_session_state_payload(payload, ToolrtSandboxSessionState)
