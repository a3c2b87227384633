"""The file and archive operations as the agent serves them.

Each runs on a thread of its own as the sandbox user (that thread's ids
are switched, files.as_sandbox_user), within a Budget (budget.py), and answers exactly once; the
selector loop never runs one, so however long a read, a listing or an
archive takes, every other request of the session is still served and
every command's deadline still kept. Replies from these threads go
through the agent's locked `send`. Archives stream under flow control
(flow.py): the loop only hands chunks and credits to the transfer's thread.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, Tuple, Type

from . import budget, files, flow, protocol, records, users
from .ops import operation
from .protocol import INVALID_ARGUMENTS
from .redact import Redactor

if TYPE_CHECKING:
    from .loop import Agent

FileOp = Callable[[Any, bytes], Tuple[protocol.Message, bytes]]


def serve(
    agent: Agent,
    rid: int,
    seconds: float,
    fn: Callable[[], Tuple[protocol.Message, bytes]],
    streams: bool = False,
    user: str = "",
    capabilities: bool = False,
) -> None:
    """Run `fn` off the loop within `seconds`; cancellable by request id.

    When no thread can be had (the sandbox's pids limit is full, or its
    runtime refuses one), an operation that needs nothing more from the
    loop runs on it instead, still within its budget, and one that streams
    (its chunks and credits arrive through the loop) is refused honestly.
    """
    limit = budget.Budget(seconds)
    agent.file_ops[rid] = limit.cancelled

    def work() -> None:
        budget.start(limit)
        try:
            answer(agent, rid, fn, user, capabilities)
        finally:
            budget.start(None)
            agent.file_ops.pop(rid, None)
            # Chunks or credits still arriving for it are dropped.
            agent.flows.pop(rid, None)

    try:
        threading.Thread(target=work, name=f"op-{rid}", daemon=True).start()
    except RuntimeError:
        if not streams:
            work()
            return
        agent.file_ops.pop(rid, None)
        agent.flows.pop(rid, None)
        agent.fail(
            rid,
            protocol.LIMIT_EXCEEDED,
            "the sandbox cannot start a thread for this transfer (its pids limit is full?)",
        )


def answer(
    agent: Agent,
    rid: int,
    fn: Callable[[], Tuple[protocol.Message, bytes]],
    user: str = "",
    capabilities: bool = False,
) -> None:
    """Run a file op as `user` (the sandbox user by default) and answer it exactly once."""
    try:
        with files.as_user(users.resolve(user, capabilities)):
            reply, data = fn()
    except Exception as exc:  # noqa: BLE001 - the request is answered whatever happens
        failure = failure_of(exc)
        agent.fail(rid, failure.code, failure.message)
        return
    agent.send(reply, rid, data)


def failure_of(exc: Exception) -> protocol.Failure:
    """The agent error code and message a file op's exception is answered with."""
    if isinstance(exc, (files.FileOpError, budget.BudgetExceeded, users.UnknownUser)):
        return protocol.Failure(code=exc.code, message=exc.message)
    if isinstance(exc, OSError):
        failure = files.os_failure(exc, getattr(exc, "filename", None) or "path")
        return protocol.Failure(code=failure.code, message=failure.message)
    if isinstance(exc, _tar_errors()):
        return protocol.Failure(code=INVALID_ARGUMENTS, message=f"broken tar archive: {exc}")
    if isinstance(exc, RecursionError):
        # os.fwalk and tarfile recurse once per directory level.
        message = "the directory tree is nested too deeply to handle (about 900 levels at most)"
        return protocol.Failure(code=protocol.LIMIT_EXCEEDED, message=message)
    return protocol.Failure(code=protocol.INTERNAL, message=f"{type(exc).__name__}: {exc}")


def _tar_errors() -> Tuple[Type[BaseException], ...]:
    # tarfile (and the compression modules it pulls in) costs the agent
    # megabytes: it is imported only once an archive op runs.
    tarfile = sys.modules.get("tarfile")
    return (tarfile.TarError, EOFError) if tarfile is not None else (EOFError,)


def _register(request_type: Type[protocol.Message], fn: FileOp) -> None:
    def handle(agent: Agent, rid: int, request: protocol.Message, body: bytes) -> None:
        seconds = getattr(request, "deadline_s", protocol.FILE_OP_SECONDS)
        serve(agent, rid, seconds, lambda: fn(request, body))

    operation(request_type)(handle)


for _request_type, _fn in (
    (protocol.Resolve, files.resolve),
    (protocol.Write, files.write),
    (protocol.Unlink, files.unlink),
    (protocol.ListDir, files.list_dir),
):
    _register(_request_type, _fn)


@operation(protocol.Read)
def op_read(agent: Agent, rid: int, request: protocol.Read, body: bytes) -> None:
    def read(request: protocol.Read) -> Tuple[protocol.ReadReply, bytes]:
        reply, data = files.read(request, body)
        if not request.redact:
            return reply, data
        # A read cut at its byte cap may end inside a secret: that piece goes too.
        return reply, agent.redactor.redact(data, cut_after=reply.truncated)

    def run() -> Tuple[protocol.Message, bytes]:
        if not request.resolve:
            return read(request)
        # As the resolve op does; what goes wrong after it is answered in
        # the reply, beside the path, for the daemon's allowlist to see first.
        real = os.path.realpath(request.path)
        try:
            reply, data = read(records.replace(request, path=real, resolve=False))
        except Exception as exc:  # noqa: BLE001 - every failure travels in the reply
            return protocol.ReadReply(path=real, failure=failure_of(exc)), b""
        reply.path = real
        return reply, data

    serve(agent, rid, request.deadline_s, run)


def _who(request: Any) -> Tuple[str, bool]:
    """Whom a request's file work runs as (programs' requests name a user)."""
    return getattr(request, "user", ""), getattr(request, "capabilities", False)


def serve_inflow(
    agent: Agent,
    rid: int,
    request: Any,
    consume: Callable[[flow.Inflow], protocol.Message],
) -> None:
    """Serve `request` (with deadline_s and window) whose data the daemon
    streams in as ArchiveChunks: `consume` reads them from its Inflow."""
    inflow = flow.Inflow(request.window, lambda n: agent.send(protocol.Credit(chunks=n), rid))
    agent.flows[rid] = inflow
    user, capabilities = _who(request)
    serve(agent, rid, request.deadline_s, lambda: (consume(inflow), b""), True, user, capabilities)


def serve_outflow(
    agent: Agent,
    rid: int,
    request: Any,
    produce: Callable[[Callable[[bytes], None]], protocol.Message],
) -> None:
    """Serve `request` (with deadline_s and window) whose data streams out
    as ArchiveChunks: `produce` emits each, within the daemon's credits."""
    outflow = flow.Outflow(request.window)
    agent.flows[rid] = outflow

    def emit(chunk: bytes) -> None:
        outflow.spend()
        agent.send(protocol.ArchiveChunk(), rid, chunk)

    user, capabilities = _who(request)
    serve(agent, rid, request.deadline_s, lambda: (produce(emit), b""), True, user, capabilities)


@operation(protocol.Extract)
def op_extract(agent: Agent, rid: int, request: protocol.Extract, body: bytes) -> None:
    def run(inflow: flow.Inflow) -> protocol.Message:
        from . import archives

        return archives.extract(request, inflow)

    serve_inflow(agent, rid, request, run)


@operation(protocol.Archive)
def op_archive(agent: Agent, rid: int, request: protocol.Archive, body: bytes) -> None:
    def run(emit: Callable[[bytes], None]) -> protocol.Message:
        from . import pack

        redactor = agent.redactor if request.redact else Redactor()
        return pack.archive(request, emit, redactor)

    serve_outflow(agent, rid, request, run)


@operation(protocol.ArchiveChunk)
def op_chunk(agent: Agent, rid: int, request: protocol.ArchiveChunk, body: bytes) -> None:
    """A chunk of an Extract's archive; none answers (the Extract's reply does)."""
    inflow = agent.flows.get(rid)
    if isinstance(inflow, flow.Inflow):
        inflow.put(body, request.end)


@operation(protocol.Credit)
def op_credit(agent: Agent, rid: int, request: protocol.Credit, body: bytes) -> None:
    outflow = agent.flows.get(rid)
    if isinstance(outflow, flow.Outflow):
        outflow.grant(request.chunks)
