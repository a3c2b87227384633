"""The programs' RPCs (Exec, ReadFile, WriteFile, StatPath): a mixin of the
ToolRuntime servicer, converting proto ↔ domain (sessions/programs.py).

Each leaves an audit record (`exec` with its argv or command hashed,
`file.read`, `file.write`, `file.stat`) before it answers, and one for a
refusal with a status (`audit.guard`).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import grpc

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.agent import protocol
from runtime.audit import AuditLog
from runtime.auth.principals import Principal
from runtime.server.auth import principal_of
from runtime.sessions.programs import ExecSpec, Programs, WriteSpec, new_exec_id, refused


def exec_spec_from_pb(start: pb.ExecStart) -> ExecSpec:
    return ExecSpec(
        session_id=start.session_id,
        argv=list(start.argv),
        command=start.command,
        cwd=start.cwd,
        env=dict(start.env),
        user=start.user,
        timeout_s=start.timeout_s,
        tty=start.tty,
        rows=start.size.rows,
        cols=start.size.cols,
        stdin_open=start.stdin_open,
        output_cap_bytes=start.output_cap_bytes,
        exec_id=start.exec_id,
    )


def signal_name(text: str) -> str:
    name = text.upper().removeprefix("SIG")
    if name not in protocol.SIGNAL_NAMES:
        msg = f"signal {text[:20]!r}: expected one of {', '.join(protocol.SIGNAL_NAMES)}"
        raise refused(msg)
    return name


async def exec_inputs(
    requests: AsyncIterator[pb.ExecRequest], spec: ExecSpec
) -> AsyncGenerator[tuple[protocol.ProgramInput, bytes], None]:
    """What the client sends after `start`, as the agent's events."""
    async for message in requests:
        kind = message.WhichOneof("kind")
        if kind == "signal":
            yield protocol.Signal(signal=signal_name(message.signal)), b""
        elif kind in ("stdin", "stdin_eof") and not (spec.stdin_open or spec.tty):
            msg = "stdin for an exec started without stdin_open (or tty)"
            raise refused(msg)
        elif kind == "stdin":
            yield protocol.Stdin(), message.stdin
        elif kind == "stdin_eof" and message.stdin_eof:
            yield protocol.Stdin(eof=True), b""
        elif kind == "resize" and not spec.tty:
            msg = "resize: this exec has no terminal (start it with tty)"
            raise refused(msg)
        elif kind == "resize":
            yield protocol.Resize(rows=message.resize.rows, cols=message.resize.cols), b""
        elif kind == "start":
            msg = "a second ExecRequest.start: one exec per stream"
            raise refused(msg)


def argv_digest(spec: ExecSpec) -> dict[str, Any]:
    """What identifies an exec without its arguments: their hash and size."""
    raw = b"\0".join(a.encode("utf-8", "surrogatepass") for a in spec.argv) or spec.command.encode(
        "utf-8", "surrogatepass"
    )
    return {"args_sha256": hashlib.sha256(raw).hexdigest(), "args_bytes": len(raw)}


def audited_user(user: str) -> str:
    """The user a program asked for, as the audit log records it ("" = the sandbox user)."""
    return user[:64] or "sandbox"


def exit_to_pb(reply: protocol.SpawnExit) -> pb.ExecExit:
    return pb.ExecExit(
        exit_code=reply.exit_code,
        signal=reply.signal,
        timed_out=reply.killed == "deadline",
        stdout_dropped_bytes=reply.stdout_dropped,
        stderr_dropped_bytes=reply.stderr_dropped,
    )


class ProgramRpcs:
    """The servicer's methods for programs; it sets `_programs` and `_audit`."""

    _programs: Programs
    _audit: AuditLog

    async def Exec(
        self, request_iterator: AsyncIterator[pb.ExecRequest], context: Any
    ) -> AsyncIterator[pb.ExecEvent]:
        who, started = principal_of(context), time.monotonic()
        self._audit.check()
        first = await anext(request_iterator, None)
        if first is None or first.WhichOneof("kind") != "start":
            msg = "the first ExecRequest must be `start`"
            raise refused(msg)
        spec = exec_spec_from_pb(first.start)
        exec_id = spec.exec_id or new_exec_id()
        inputs = exec_inputs(request_iterator, spec)
        events = self._programs.exec(who.tenant, spec, inputs)
        ended = protocol.SpawnExit()
        user = audited_user(spec.user)
        with self._audit.guard("exec", who, spec.session_id, user=user):
            # Leaving early (the client cancelled, went away or ran out of
            # time) closes `events`: the program's whole tree is killed.
            async with contextlib.aclosing(events):
                async for message, data in events:
                    if isinstance(message, protocol.Spawned):
                        started_pb = pb.ExecStarted(exec_id=exec_id, pid=message.pid)
                        yield pb.ExecEvent(started=started_pb)
                    elif isinstance(message, protocol.Output):
                        if message.stream == "stderr":
                            yield pb.ExecEvent(stderr=data)
                        else:
                            yield pb.ExecEvent(stdout=data)
                    elif isinstance(message, protocol.SpawnExit):
                        ended = message
        self._audit.transfer(
            "exec",
            who,
            spec.session_id,
            started,
            exit_code=ended.exit_code,
            exec_id=exec_id,
            user=user,
            **argv_digest(spec),
        )
        yield pb.ExecEvent(exit=exit_to_pb(ended))

    def _file_done(
        self,
        event: str,
        who: Principal,
        session_id: str,
        started: float,
        path: str,
        user: str,
        size: int | None = None,
    ) -> None:
        """The audit record of a file RPC that succeeded."""
        fields: dict[str, Any] = {"path": path[:256], "user": user}
        if size is not None:
            fields["bytes"] = size
        self._audit.transfer(event, who, session_id, started, **fields)

    async def ReadFile(
        self, request: pb.ReadFileRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ReadFileChunk]:
        who, started, size = principal_of(context), time.monotonic(), 0
        user = audited_user(request.user)
        with self._audit.guard("file.read", who, request.session_id, user=user):
            chunks = self._programs.read(
                who.tenant,
                request.session_id,
                request.path,
                request.user,
                request.offset,
                request.max_bytes,
            )
            async with contextlib.aclosing(chunks):
                async for chunk in chunks:
                    size += len(chunk)
                    yield pb.ReadFileChunk(data=chunk)
        self._file_done("file.read", who, request.session_id, started, request.path, user, size)

    async def WriteFile(
        self, request_iterator: AsyncIterator[pb.WriteFileRequest], context: Any
    ) -> pb.WriteFileResponse:
        who, started = principal_of(context), time.monotonic()
        self._audit.check()
        first = await anext(request_iterator, None)
        if first is None or first.WhichOneof("kind") != "start":
            msg = "the first WriteFileRequest must be `start`"
            raise refused(msg)
        start = first.start
        spec = WriteSpec(
            session_id=start.session_id,
            path=start.path,
            user=start.user,
            mode=start.mode,
            make_parents=start.make_parents,
            if_exists=start.if_exists,
        )

        async def chunks() -> AsyncGenerator[bytes, None]:
            async for message in request_iterator:
                if message.WhichOneof("kind") == "start":
                    msg = "a second WriteFileRequest.start: one file per stream"
                    raise refused(msg)
                if message.data:
                    yield message.data

        data, user = chunks(), audited_user(spec.user)
        async with contextlib.aclosing(data):
            with self._audit.guard("file.write", who, spec.session_id, user=user):
                size = await self._programs.write(who.tenant, spec, data)
        self._file_done("file.write", who, spec.session_id, started, spec.path, user, size)
        return pb.WriteFileResponse(bytes=size)

    async def StatPath(
        self, request: pb.StatPathRequest, context: grpc.aio.ServicerContext
    ) -> pb.PathInfo:
        who, started = principal_of(context), time.monotonic()
        user = audited_user(request.user)
        with self._audit.guard("file.stat", who, request.session_id, user=user):
            info = await self._programs.stat(
                who.tenant, request.session_id, request.path, request.user
            )
        self._file_done("file.stat", who, request.session_id, started, request.path, user)
        return pb.PathInfo(
            exists=info.exists,
            type=info.type,
            size=info.size,
            mode=info.mode,
            mtime=info.mtime,
            link_target=info.link_target,
        )
