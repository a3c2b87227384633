"""The file and archive operations as the agent serves them.

Each runs on a thread of its own as the sandbox user (setfsuid is per
thread), within a Budget (budget.py), and answers exactly once; the
selector loop never runs one, so however long a read, a listing or an
archive takes, every other request of the session is still served and
every command's deadline still kept. Replies from these threads go
through the agent's locked `send`.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, Tuple, Type

from . import budget, files, protocol
from .ops import operation
from .protocol import INVALID_ARGUMENTS

if TYPE_CHECKING:
    from .loop import Agent

FileOp = Callable[[Any, bytes], Tuple[protocol.Message, bytes]]


def serve(
    agent: Agent, rid: int, seconds: float, fn: Callable[[], Tuple[protocol.Message, bytes]]
) -> None:
    """Run `fn` off the loop within `seconds`; cancellable by request id."""
    limit = budget.Budget(seconds)
    agent.file_ops[rid] = limit.cancelled

    def work() -> None:
        budget.start(limit)
        try:
            answer(agent, rid, fn)
        finally:
            budget.start(None)
            agent.file_ops.pop(rid, None)

    threading.Thread(target=work, name=f"op-{rid}", daemon=True).start()


def answer(agent: Agent, rid: int, fn: Callable[[], Tuple[protocol.Message, bytes]]) -> None:
    """Run a file op as the sandbox user and answer it exactly once."""
    try:
        with files.as_sandbox_user():
            reply, data = fn()
    except (files.FileOpError, budget.BudgetExceeded) as exc:
        agent.fail(rid, exc.code, exc.message)
        return
    except OSError as exc:
        failure = files.os_failure(exc, getattr(exc, "filename", None) or "path")
        agent.fail(rid, failure.code, failure.message)
        return
    except _tar_errors() as exc:
        agent.fail(rid, INVALID_ARGUMENTS, f"broken tar archive: {exc}")
        return
    except RecursionError:
        # os.fwalk and tarfile recurse once per directory level.
        message = "the directory tree is nested too deeply to handle (about 900 levels at most)"
        agent.fail(rid, protocol.LIMIT_EXCEEDED, message)
        return
    except Exception as exc:  # noqa: BLE001 - the request is answered whatever happens
        agent.fail(rid, protocol.INTERNAL, f"{type(exc).__name__}: {exc}")
        return
    agent.send(reply, rid, data)


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


def _extract(request: protocol.Extract, body: bytes) -> Tuple[protocol.Message, bytes]:
    from . import archives

    return archives.extract(request, body), b""


for _request_type, _fn in (
    (protocol.Resolve, files.resolve),
    (protocol.Read, files.read),
    (protocol.Write, files.write),
    (protocol.Unlink, files.unlink),
    (protocol.ListDir, files.list_dir),
    (protocol.Extract, _extract),
):
    _register(_request_type, _fn)


@operation(protocol.Archive)
def op_archive(agent: Agent, rid: int, request: protocol.Archive, body: bytes) -> None:
    def emit(chunk: bytes) -> None:
        agent.send(protocol.ArchiveChunk(), rid, chunk)

    def run() -> Tuple[protocol.Message, bytes]:
        from . import pack

        return pack.archive(request, emit), b""

    serve(agent, rid, request.deadline_s, run)
