"""Programs in a session: a process with bytes in and out, and files.

What harnesses and SDKs use (the Exec, ReadFile, WriteFile and StatPath
RPCs), beside the model's tools on the same sessions. Each spends one of
the session's `max_calls` and one token of its tenant's call rate, and runs
as session activity (the idle reaper waits; a lost sandbox closes the
session), without the session's write lock: programs run beside the
model's calls and each other.

Any path in the sandbox, with the permissions of the user asked for (the
sandbox user, or one of the session's `users`, sessions/grants.py): the
allowlist governs the model's file tools only, the container is the wall
here. Relative paths are under /workspace. Execs running at once are
bounded per session and per tenant (running_execs.py). Every refusal is a
ProgramError (or another request error) with DESIGN's reason. A file read
or write takes one of the transfer slots uploads and downloads share
(slots.py): bounded daemon-wide and per tenant, lost when its client stalls.
"""

from __future__ import annotations

import contextlib
import posixpath
import uuid
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterator
from dataclasses import dataclass, field

from runtime.agent import protocol
from runtime.config import Config
from runtime.constants import SANDBOX_UID, WORKSPACE
from runtime.errors import (
    CallTimeout,
    FileMissing,
    InvalidArguments,
    LimitExceeded,
    PathDenied,
    ProgramError,
    SandboxLost,
    ToolFailure,
)
from runtime.sandbox.agent_client import TRANSFER_SECONDS
from runtime.sessions import grants
from runtime.sessions.manager import SessionManager
from runtime.sessions.running_execs import RunningExecs
from runtime.sessions.session import Session
from runtime.sessions.slots import TransferSlots
from runtime.sessions.transfers import session_activity
from runtime.tools.shell import command_env
from runtime.tools.validation import env_problem, path_too_long

# An Exec with no timeout_s, in a session without call_timeout_s: its
# session's lifetime ends it.
NO_TIMEOUT_S = 365 * 86400.0
# Tool failures of the agent's client, as the reasons a program sees.
REASONS: dict[type[ToolFailure], str] = {
    CallTimeout: "TIMEOUT",
    InvalidArguments: "INVALID_REQUEST",
    LimitExceeded: "QUOTA_EXCEEDED",
    SandboxLost: "SANDBOX_LOST",
    FileMissing: "FILE_NOT_FOUND",
    PathDenied: "PERMISSION_DENIED",
}
IF_EXISTS = ("replace", "fail", "append")


# A terminal's TERM unless the exec's env names one (as `docker run -t`;
# commands without a terminal keep the session's "dumb").
TTY_TERM = "xterm"


@dataclass
class ExecSpec:
    """What an Exec's first message asks for."""

    session_id: str
    argv: list[str] = field(default_factory=list)
    command: str = ""
    cwd: str = ""
    env: dict[str, str] = field(default_factory=dict)
    user: str = ""
    timeout_s: float = 0.0
    tty: bool = False
    rows: int = 0
    cols: int = 0
    stdin_open: bool = False
    output_cap_bytes: int = 0
    exec_id: str = ""


@dataclass
class WriteSpec:
    """What a WriteFile's first message asks for."""

    session_id: str
    path: str
    user: str = ""
    mode: int = 0
    make_parents: bool = False
    if_exists: str = ""


def refused(message: str) -> ProgramError:
    return ProgramError(message, "INVALID_REQUEST")


def in_sandbox(path: str, what: str = "path") -> str:
    """`path` as the sandbox's kernel will take it: relative ones under /workspace."""
    if not path:
        msg = f"{what} is empty: name a path in the sandbox"
        raise refused(msg)
    if "\x00" in path:
        msg = f"{what} {path[:200]!r} contains a NUL character"
        raise refused(msg)
    problem = path_too_long(path)
    if problem:
        msg = f"{what} {path[:200]!r}...: {problem}"
        raise refused(msg)
    return posixpath.join(WORKSPACE, path)


@dataclass(frozen=True)
class RunAs:
    """Whom the agent runs a program or file operation as."""

    # "" for the sandbox user, else as the request named it.
    user: str
    # Root gets its session's capabilities (the tenant's root_capabilities).
    capabilities: bool


def run_as(session: Session, user: str) -> RunAs:
    """The sandbox user or one of the session's `users`, else USER_NOT_ALLOWED."""
    if not grants.user_listed(user, session.users):
        allowed = ", ".join(repr(u) for u in session.users)
        msg = (
            f"user {user[:64]!r} is not one of this session's users: the sandbox user "
            f'("sandbox", uid {SANDBOX_UID}){", " + allowed if allowed else ""} '
            "(CreateSession's `users`, within the tenant's grant)"
        )
        raise ProgramError(msg, "USER_NOT_ALLOWED")
    if user in grants.SANDBOX_NAMES:
        return RunAs("", False)
    return RunAs(user, session.root_capabilities)


@contextlib.contextmanager
def as_program_errors() -> Iterator[None]:
    """The agent client's tool failures as the reasons a program sees."""
    try:
        yield
    except ToolFailure as exc:
        reason = REASONS.get(type(exc))
        if reason is None:
            raise
        raise ProgramError(exc.message, reason) from exc


class Programs:
    """Exec and files for programs in the sessions of `manager`."""

    def __init__(
        self,
        config: Config,
        manager: SessionManager,
        slots: TransferSlots,
        running: RunningExecs,
    ) -> None:
        self._config = config
        self._manager = manager
        # A file read or write holds a window of chunks in the daemon: it
        # takes a transfer slot, as an upload or a download does.
        self._slots = slots
        # (tenant, session, exec_id) of the execs running under a client's
        # exec_id: a retried start of one is refused, never run twice.
        self._exec_ids: set[tuple[str, str, str]] = set()
        # Execs running, by session and tenant: bounded by their shares.
        self._running = running

    @contextlib.asynccontextmanager
    async def _session(
        self, tenant: str, session_id: str, user: str
    ) -> AsyncIterator[tuple[Session, RunAs]]:
        """The session and whom to run as, once the request has paid for
        itself (a call of its budget, a token of its tenant's rate), as
        session activity."""
        session = await self._manager.lookup(tenant, session_id)
        who = run_as(session, user)
        await self._manager.quotas.take_calls(tenant, 1)
        # Held for its tenant's rate: the session may have closed meanwhile.
        session = self._manager.get(tenant, session_id)
        if session.calls >= session.limits.max_calls:
            msg = (
                f"this session has used all of its {session.limits.max_calls} calls; "
                "start a new session"
            )
            raise ProgramError(msg, "QUOTA_EXCEEDED")
        session.calls += 1
        async with session_activity(self._manager, session):
            with as_program_errors():
                yield session, who

    async def stat(self, tenant: str, session_id: str, path: str, user: str) -> protocol.StatReply:
        where = in_sandbox(path)
        async with self._session(tenant, session_id, user) as (session, who):
            request = protocol.Stat(path=where, user=who.user, capabilities=who.capabilities)
            return await session.sandbox.agent.stat(request)

    async def read(
        self, tenant: str, session_id: str, path: str, user: str, offset: int, max_bytes: int
    ) -> AsyncGenerator[bytes, None]:
        """The file's bytes from `offset`, as the caller takes them."""
        where = in_sandbox(path)
        if offset < 0 or max_bytes < 0:
            msg = f"offset {offset} and max_bytes {max_bytes}: expected 0 or more"
            raise refused(msg)
        ceiling = self._config.file_max_bytes
        async with (
            self._session(tenant, session_id, user) as (session, who),
            self._slots.slot(tenant) as slot,
            contextlib.aclosing(
                session.sandbox.agent.read_path(
                    protocol.ReadPath(
                        path=where,
                        user=who.user,
                        capabilities=who.capabilities,
                        offset=offset,
                        max_bytes=min(max_bytes or ceiling, ceiling),
                        deadline_s=TRANSFER_SECONDS,
                    )
                )
            ) as chunks,
            contextlib.aclosing(self._slots.paced_out(slot, chunks)) as paced,
        ):
            async for chunk in paced:
                yield chunk

    async def write(self, tenant: str, spec: WriteSpec, chunks: AsyncIterable[bytes]) -> int:
        """Write `chunks` to the file; the bytes written."""
        where = in_sandbox(spec.path)
        if spec.if_exists not in ("", *IF_EXISTS):
            msg = f"if_exists {spec.if_exists[:40]!r}: expected one of {', '.join(IF_EXISTS)}"
            raise refused(msg)
        if spec.mode > 0o777:
            msg = f"mode {spec.mode:o}: expected permission bits (at most 0777)"
            raise refused(msg)
        async with (
            self._session(tenant, spec.session_id, spec.user) as (session, who),
            self._slots.slot(tenant) as slot,
        ):
            request = protocol.WritePath(
                path=where,
                user=who.user,
                capabilities=who.capabilities,
                mode=spec.mode or 0o644,
                make_parents=spec.make_parents,
                if_exists=spec.if_exists or "replace",
                deadline_s=TRANSFER_SECONDS,
            )
            paced = self._slots.paced_in(slot, chunks)
            reply = await session.sandbox.agent.write_path(request, paced)
        return reply.bytes

    async def exec(
        self,
        tenant: str,
        spec: ExecSpec,
        inputs: AsyncIterable[tuple[protocol.ProgramInput, bytes]],
    ) -> AsyncGenerator[tuple[protocol.Message, bytes], None]:
        """Run the program, fed by `inputs`: its Spawned event, its Output
        events as the caller takes them, and last its SpawnExit. Closing
        this early kills the program's whole tree. Under a terminal (`tty`)
        stdin is always open: a terminal is typed into."""
        argv = self.argv_of(spec)
        cwd = in_sandbox(spec.cwd or WORKSPACE, "cwd")
        for name, value in spec.env.items():
            problem = env_problem(name, value)
            if problem:
                msg = f"environment variable {name[:60]!r}: {problem}"
                raise refused(msg)
        if not 0 <= spec.timeout_s <= NO_TIMEOUT_S or spec.output_cap_bytes < 0:
            msg = (
                f"timeout_s {spec.timeout_s:g}, output_cap_bytes {spec.output_cap_bytes}: "
                f"expected 0 (the default) or more, timeout_s at most {NO_TIMEOUT_S:g}"
            )
            raise refused(msg)
        ceiling = self._config.exec_output_cap_bytes
        # Refused past its shares before it spends a call of the session.
        with self._running_as(tenant, spec), self._running.hold(tenant, spec.session_id):
            async with self._session(tenant, spec.session_id, spec.user) as (session, who):
                events = session.sandbox.agent.spawn(
                    self.spawn_request(spec, session, who, cwd, ceiling), argv, inputs
                )
                async with contextlib.aclosing(events):
                    async for event in events:
                        yield event

    @contextlib.contextmanager
    def _running_as(self, tenant: str, spec: ExecSpec) -> Iterator[None]:
        """Hold the exec's exec_id (if the client named one) while it runs."""
        if not spec.exec_id:
            yield
            return
        key = (tenant, spec.session_id, spec.exec_id)
        if key in self._exec_ids:
            msg = (
                f"exec_id {spec.exec_id[:80]!r} is running in this session: a retried start "
                "is not run twice (wait for its end, or name another exec_id)"
            )
            raise refused(msg)
        self._exec_ids.add(key)
        try:
            yield
        finally:
            self._exec_ids.discard(key)

    def spawn_request(
        self, spec: ExecSpec, session: Session, who: RunAs, cwd: str, ceiling: int
    ) -> protocol.Spawn:
        """The agent's Spawn for an exec in `session`, as `who`."""
        timeout = spec.timeout_s or session.limits.call_timeout_s or NO_TIMEOUT_S
        env = command_env(session.env, spec.env)
        if spec.tty and "TERM" not in spec.env:
            env["TERM"] = TTY_TERM
        return protocol.Spawn(
            cwd=cwd,
            user=who.user,
            capabilities=who.capabilities,
            env=env,
            timeout_s=timeout,
            grace_s=self._config.kill_grace_s,
            stdin_open=spec.stdin_open or spec.tty,
            tty=spec.tty,
            rows=spec.rows,
            cols=spec.cols,
            output_cap=min(spec.output_cap_bytes or ceiling, ceiling),
        )

    @staticmethod
    def argv_of(spec: ExecSpec) -> list[str]:
        """The program's argv: `argv`, or `command` under /bin/sh -c."""
        if bool(spec.argv) == bool(spec.command):
            msg = "name exactly one of argv (a program and its arguments) and command (for sh -c)"
            raise refused(msg)
        argv = spec.argv or ["/bin/sh", "-c", spec.command]
        if not argv[0]:
            msg = "argv[0] is empty: name the program to run"
            raise refused(msg)
        if any("\x00" in arg for arg in argv):
            msg = "argv contains a NUL character, which no program could receive"
            raise refused(msg)
        return argv


def new_exec_id() -> str:
    return f"exec_{uuid.uuid4().hex[:16]}"
