"""LangChain Deep Agents: `ToolrtSandbox`, a `BaseSandbox` over a toolrt session.

`ToolrtSandbox()` opens a session on the daemon the `TOOLRT_*` variables name;
`get_or_create_sandbox(sandbox_id)` attaches to that session while it is open
and opens a new one otherwise (Deep Agents has no provider registry of its
own). Pass it as `create_deep_agent(backend=...)`. `execute` runs each command
in a fresh shell in `/workspace`, stdout and stderr merged; the file tools of
`BaseSandbox` run through it, and uploads and downloads go through toolrt's tar
transfers, which reach `/workspace` and `/tmp`. A command over its timeout is
killed and comes back with exit code 124; a session that cannot run anything
any more raises `SandboxGone`; `aexecute` cancelled stops the command.
"""

from __future__ import annotations

from typing import Any

from deepagents.backends.protocol import (  # type: ignore[import-not-found,unused-ignore]
    ExecuteResponse,
    FileDownloadResponse,
    FileUploadResponse,
)
from deepagents.backends.sandbox import BaseSandbox  # type: ignore[import-not-found,unused-ignore]

from runtime.client import Client
from runtime.integrations import commands
from runtime.integrations.commands import CommandOutcome
from runtime.integrations.connection import (
    SandboxGone,
    attach_session,
    client_from_env,
    close_quietly,
    open_session,
)

HARNESS = "deepagents"
# The exit code of a command killed at its timeout, as coreutils' `timeout` says it.
TIMED_OUT_EXIT = 124
DEFAULT_TIMEOUT_S = 30 * 60

__all__ = ["SandboxGone", "ToolrtSandbox", "get_or_create_sandbox"]


def _response(outcome: CommandOutcome, timeout_s: float) -> Any:
    """A command's outcome as Deep Agents' `ExecuteResponse`."""
    if outcome.timed_out:
        note = f"\n[the command timed out after {timeout_s:g} s and was killed]"
        return ExecuteResponse(output=outcome.output + note, exit_code=TIMED_OUT_EXIT)
    if outcome.failure:
        # Refused before it ran (e.g. a NUL in the command): no exit code to give.
        return ExecuteResponse(output=f"Error: {outcome.failure}", exit_code=None)
    return ExecuteResponse(
        output=outcome.output, exit_code=outcome.exit_code, truncated=outcome.truncated
    )


class ToolrtSandbox(BaseSandbox):  # type: ignore[misc,unused-ignore]
    """A Deep Agents sandbox backend in a toolrt session (sync and async)."""

    def __init__(
        self,
        session_id: str = "",
        *,
        client: Client | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        owns_session: bool | None = None,
        **session_fields: Any,
    ) -> None:
        """Attach to the open session `session_id`, else open one (`session_fields`:
        `CreateSessionRequest` fields such as `image`). `close()` closes the
        session when this sandbox opened it, or when `owns_session` says so."""
        self._client = client or client_from_env()
        self._timeout_s = timeout_s
        self._owns_session = not session_id if owns_session is None else owns_session
        if session_id:
            self.session = attach_session(self._client, session_id)
        else:
            self.session = open_session(self._client, HARNESS, **session_fields)

    @property
    def id(self) -> str:
        return self.session.id

    def execute(self, command: str, *, timeout: int | None = None) -> Any:
        limit = timeout or self._timeout_s
        return _response(commands.run(self.session, command, timeout_s=limit), limit)

    async def aexecute(self, command: str, *, timeout: int | None = None) -> Any:  # noqa: ASYNC109
        limit = timeout or self._timeout_s
        return _response(await commands.arun(self.session, command, timeout_s=limit), limit)

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[Any]:
        responses = []
        for path, content in files:
            problem = commands.upload(self.session, path, content)
            responses.append(FileUploadResponse(path=path, error=problem and problem.value))
        return responses

    def download_files(self, paths: list[str]) -> list[Any]:
        responses = []
        for path in paths:
            got = commands.download(self.session, path)
            if isinstance(got, commands.FileProblem):
                responses.append(FileDownloadResponse(path=path, content=None, error=got.value))
            else:
                responses.append(FileDownloadResponse(path=path, content=got, error=None))
        return responses

    def close(self) -> None:
        """Close the session if this sandbox opened it."""
        if getattr(self, "_owns_session", False):
            close_quietly(self._client, self.session.id)
            self._owns_session = False

    def __enter__(self) -> ToolrtSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def get_or_create_sandbox(
    sandbox_id: str = "", *, client: Client | None = None, **session_fields: Any
) -> ToolrtSandbox:
    """The open session `sandbox_id` as a sandbox, or a new one when it is not
    open (never given, closed or expired): keep `.id` to come back to it, and
    `close()` it when done, whichever process opened it."""
    client = client or client_from_env()
    if sandbox_id:
        try:
            return ToolrtSandbox(sandbox_id, client=client, owns_session=True)
        except SandboxGone:
            pass
    return ToolrtSandbox(client=client, **session_fields)
