"""Docker's failures → toolrt errors, all in this module.

The backend calls these around everything that can fail because of the
engine: SDK calls (`map_docker_errors`), the engine's socket and deadlines
(`require_engine_socket`, `map_engine_timeout`), the attach stream
(`map_attach_errors`, `check_attach_status`), a sandbox whose agent never
said hello (`map_agent_start`), and removals of containers that may already
be gone (`tolerate_gone`). A request the caller can fix (a missing image,
one the agent cannot run in) is BadRequest; anything else is EngineUnavailable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import docker.errors
import requests.exceptions

from runtime.errors import BadRequest, CallTimeout, EngineUnavailable, SandboxLost

# Exit statuses of a container that was stopped (SIGKILL, SIGTERM), not one
# whose process ended by itself.
STOPPED_EXIT_CODES = (128 + 9, 128 + 15)
# "removal of container ... is already in progress": someone else finishes it.
CONFLICT = 409


@contextlib.contextmanager
def map_docker_errors(what: str) -> Iterator[None]:
    """Turn the SDK's exceptions during `what` into BadRequest/EngineUnavailable."""
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        msg = (
            f"{what}: image not found on this host ({exc.explanation}); toolrt never pulls "
            "(`toolrt image build` makes the default one)"
        )
        raise BadRequest(msg) from exc
    except docker.errors.APIError as exc:
        text = str(exc.explanation or exc)
        if "executable file not found" in text or "no such file or directory" in text:
            msg = f"{what}: the sandbox's agent could not start in this image ({text})"
            raise BadRequest(msg) from exc
        if exc.status_code is not None and exc.status_code < 500 and exc.status_code != CONFLICT:
            msg = f"{what}: Docker refused the request: {text}"
            raise BadRequest(msg) from exc
        msg = f"{what}: Docker engine error: {text}"
        raise EngineUnavailable(msg) from exc
    except (requests.exceptions.ConnectionError, docker.errors.DockerException) as exc:
        msg = f"{what}: the Docker engine does not answer ({exc}); is dockerd running?"
        raise EngineUnavailable(msg) from exc
    except requests.exceptions.Timeout as exc:
        msg = f"{what}: the Docker engine did not answer in time"
        raise EngineUnavailable(msg) from exc


def require_engine_socket(what: str, path: str) -> None:
    """EngineUnavailable unless the engine's unix socket is there (no SDK call
    then: it would only fail later and slower, and leak a connection)."""
    if not os.path.exists(path):
        msg = f"{what}: no Docker engine socket at {path}; is dockerd running?"
        raise EngineUnavailable(msg)


@contextlib.contextmanager
def map_engine_timeout(what: str, timeout_s: float) -> Iterator[None]:
    """An engine call that outlived its deadline is EngineUnavailable."""
    try:
        yield
    except TimeoutError as exc:
        msg = f"{what}: the Docker engine did not answer within {timeout_s} s"
        raise EngineUnavailable(msg) from exc


@contextlib.contextmanager
def map_attach_errors(what: str, timeout_s: float) -> Iterator[None]:
    """Connecting to the engine for an attach, and reading its answer."""
    try:
        with map_engine_timeout(what, timeout_s):
            yield
    except (OSError, EOFError, asyncio.LimitOverrunError) as exc:
        # A refused connection or a missing socket (OSError), an engine that
        # hung up mid-answer (IncompleteReadError is an EOFError) or sent a
        # header past the limit.
        msg = f"{what}: attach to the sandbox failed: {type(exc).__name__}: {exc}"
        raise EngineUnavailable(msg) from exc


def check_attach_status(what: str, head: bytes) -> None:
    """The engine's HTTP answer to an attach must switch protocols (or be OK)."""
    status = head.split(b"\r\n", 1)[0]
    if b" 101 " not in status and b" 200 " not in status:
        msg = f"{what}: attach to the sandbox failed: {status.decode(errors='replace')}"
        raise EngineUnavailable(msg)


def exited_by_itself(state: dict[str, Any]) -> bool:
    """Did a container (its inspected `State`) end on its own — not stopped,
    killed or OOM-killed — so that its image is what failed?"""
    killed = state.get("OOMKilled") or state.get("ExitCode") in STOPPED_EXIT_CODES
    return not state.get("Running") and not killed


@contextlib.asynccontextmanager
async def map_agent_start(
    what: str, image: str, timeout_s: float, ended_by_itself: Callable[[], Awaitable[bool]]
) -> AsyncIterator[None]:
    """The first hello of a new sandbox: an agent that exited by itself means
    the image cannot run it (BadRequest); one that was stopped or removed,
    or never answered, is the engine's business (EngineUnavailable)."""
    try:
        yield
    except SandboxLost as exc:
        if await ended_by_itself():
            msg = (
                f"{what}: the in-sandbox agent exited at start-up in the image {image!r} "
                "(an image of another architecture than the host's?)"
            )
            raise BadRequest(msg) from exc
        msg = f"{what}: the sandbox was stopped or removed while it started"
        raise EngineUnavailable(msg) from exc
    except (TimeoutError, CallTimeout) as exc:
        msg = f"{what}: the sandbox did not answer within {timeout_s} s"
        raise EngineUnavailable(msg) from exc


class Removal:
    """What `tolerate_gone` saw: whether someone else's removal was under way."""

    in_progress = False


@contextlib.contextmanager
def tolerate_gone() -> Iterator[Removal]:
    """Around a call on a container that may be gone (or going): a container
    that is not there, or whose removal is already in progress, is no error
    (the block just ends early; the latter sets `in_progress`)."""
    seen = Removal()
    try:
        yield seen
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code != CONFLICT:
            raise
        seen.in_progress = True
