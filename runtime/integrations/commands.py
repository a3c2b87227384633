"""A command or a file in a session, through today's public RPCs, with every
failure sorted into the few kinds harnesses have types for.

Harnesses run each command in a fresh shell in a fixed directory with stdout
and stderr merged, so `run` asks the `shell` tool for exactly that (a `cwd`
for every call, `merge_output`) and kills a command at its timeout instead of
moving a silent one to the background. Files travel as tar archives
(`UploadFiles`/`DownloadFiles`), which reach only the sandbox's writable
areas; the daemon says why a transfer failed in its message only, so the
kinds are read from it here, in one place.
"""

from __future__ import annotations

import asyncio
import io
import json
import posixpath
import tarfile
import uuid
from dataclasses import dataclass
from enum import StrEnum

import grpc

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import Result, SessionHandle, ToolrtRpcError
from runtime.constants import WORKSPACE, WRITABLE_AREAS
from runtime.integrations.connection import SandboxGone

# Tool failures after which the session cannot run anything any more.
SESSION_ENDING = {"SANDBOX_LOST", "BUDGET_EXHAUSTED"}


class FileProblem(StrEnum):
    """Why a file could not be moved, in the words harnesses share."""

    NOT_FOUND = "file_not_found"
    PERMISSION = "permission_denied"
    IS_DIRECTORY = "is_directory"
    INVALID_PATH = "invalid_path"


@dataclass(frozen=True)
class CommandOutcome:
    """One command's combined output and how it ended."""

    output: str
    # None when the command never ran to an exit (refused by the daemon).
    exit_code: int | None
    truncated: bool = False
    timed_out: bool = False
    # The daemon's code and message when the command did not run to its end.
    failure: str = ""


def gone_or_raise(exc: ToolrtRpcError) -> SandboxGone:
    """A `SandboxGone` for an RPC failing because the session is gone; re-raise anything else."""
    if exc.code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
        return SandboxGone(exc.details)
    raise exc


def shell_arguments(
    command: str, cwd: str, timeout_s: float | None, env: dict[str, str] | None
) -> dict[str, object]:
    """The `shell` call running `command` as harnesses expect."""
    arguments: dict[str, object] = {"command": command, "cwd": cwd, "merge_output": True}
    if timeout_s:
        # A silent command is killed at the same time, not moved to the background.
        arguments.update(timeout_s=timeout_s, idle_timeout_s=timeout_s, on_idle="kill")
    if env:
        arguments["env"] = env
    return arguments


def outcome_of(result: Result) -> CommandOutcome:
    """A `shell` result as an outcome; raises `SandboxGone` when the session cannot run."""
    if result.error_code in SESSION_ENDING:
        msg = f"{result.error_code}: {result.error_message}"
        raise SandboxGone(msg)
    out = result.output
    exit_code = out.get("exit_code")
    return CommandOutcome(
        output=str(out.get("stdout", "")),
        exit_code=exit_code if isinstance(exit_code, int) else None,
        truncated=bool(out.get("stdout_truncated")),
        timed_out=bool(out.get("timed_out")),
        # A non-zero exit is a result, not a failure: the command ran.
        failure="" if result.ok else f"{result.error_code}: {result.error_message}",
    )


def run(
    session: SessionHandle,
    command: str,
    *,
    cwd: str = WORKSPACE,
    timeout_s: float | None = None,
    env: dict[str, str] | None = None,
) -> CommandOutcome:
    """Run `command` under bash in `cwd`; raises `SandboxGone` when the session cannot run it."""
    try:
        result = session.call("shell", shell_arguments(command, cwd, timeout_s, env))
    except ToolrtRpcError as exc:
        raise gone_or_raise(exc) from exc
    return outcome_of(result)


async def arun(
    session: SessionHandle,
    command: str,
    *,
    cwd: str = WORKSPACE,
    timeout_s: float | None = None,
    env: dict[str, str] | None = None,
) -> CommandOutcome:
    """`run` for asyncio: cancelling the awaiting task cancels the RPC, which
    stops the command and everything it started in the sandbox."""
    client = session.client
    call = pb.ToolCall(
        id=uuid.uuid4().hex,
        name="shell",
        arguments_json=json.dumps(shell_arguments(command, cwd, timeout_s, env)),
    )
    request = pb.ExecuteRequest(session_id=session.id, call=call)
    future = client.stub.Execute.future(request, metadata=client.metadata)
    try:
        reply = await asyncio.to_thread(future.result)
    except asyncio.CancelledError:
        future.cancel()
        raise
    except grpc.RpcError as exc:
        error = ToolrtRpcError(exc.code(), exc.details() or "")
        raise gone_or_raise(error) from exc
    return outcome_of(Result.from_pb(reply))


def _problem(details: str) -> FileProblem | None:
    """The kind of a transfer refusal, from the daemon's message."""
    if ": NOT_FOUND:" in details:
        return FileProblem.NOT_FOUND
    if ": PATH_DENIED:" in details:
        return FileProblem.PERMISSION
    if "only " in details and "resolves to" in details:
        return FileProblem.PERMISSION
    return None


def _transfer_problem(exc: ToolrtRpcError) -> FileProblem:
    if exc.code == grpc.StatusCode.INVALID_ARGUMENT:
        problem = _problem(exc.details)
        if problem is not None:
            return problem
    raise gone_or_raise(exc)


def _in_writable_area(path: str) -> str | None:
    """The writable area holding `path` (None outside them)."""
    for area in WRITABLE_AREAS:
        if path.startswith(area + "/"):
            return area
    return None


def upload(session: SessionHandle, path: str, content: bytes) -> FileProblem | None:
    """Write `content` to the absolute `path`, creating its parents; None on success."""
    if not path.startswith("/"):
        return FileProblem.INVALID_PATH
    path = posixpath.normpath(path)
    area = _in_writable_area(path)
    if area is None:
        return FileProblem.PERMISSION
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        member = tarfile.TarInfo(posixpath.relpath(path, area))
        member.size, member.mode = len(content), 0o644
        archive.addfile(member, io.BytesIO(content))
    try:
        session.upload(buffer.getvalue(), area)
    except ToolrtRpcError as exc:
        return _transfer_problem(exc)
    return None


def download(session: SessionHandle, path: str) -> bytes | FileProblem:
    """The bytes of the file at the absolute `path`, or why not."""
    if not path.startswith("/"):
        return FileProblem.INVALID_PATH
    try:
        data = session.download([path])
    except ToolrtRpcError as exc:
        return _transfer_problem(exc)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        first = archive.next()
        if first is None or first.isdir():
            return FileProblem.IS_DIRECTORY
        body = archive.extractfile(first) if first.isfile() else None
        if body is None:
            return FileProblem.INVALID_PATH
        return body.read()
