"""`toolrt mcp`: the same tools as an MCP server over stdio (official `mcp` SDK).

One MCP connection (one process, since stdio) is one sandbox session: it is
created when the server starts and closed when the client disconnects (stdin
closes) or the process gets SIGTERM/SIGINT.

Two ways to run the tools:
- in-process (default): a daemon core of its own (`runtime.core.build_core`
  on the Docker engine, no gRPC, no TTL or idle reaping), with shutdown
  "close" and a temporary state directory: its session ends with it. Its
  `instance` label is unique per process unless `--instance` names one, so
  it never reaps another daemon's sandboxes; its containers name its
  process, and at start a front removes those of fronts that are gone.
- `--target ADDR`: a session on a running toolrt daemon, through the client
  SDK; the daemon's limits, reaping and (later) authentication apply.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import signal
import tempfile
import uuid
from typing import TYPE_CHECKING, Any, Protocol

import mcp_types
import psutil
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

from runtime.config import Config
from runtime.constants import DEFAULT_TENANT
from runtime.dialects import mcp as mcp_dialect
from runtime.errors import ToolrtError
from runtime.models import ToolCall, ToolErrorInfo, ToolResult

if TYPE_CHECKING:
    from runtime.client import Client

log = logging.getLogger(__name__)

TENANT = DEFAULT_TENANT


class ToolFront(Protocol):
    """Where an MCP connection's calls run."""

    async def start(self) -> None: ...
    async def catalog(self) -> list[dict[str, Any]]: ...
    async def call(self, call: ToolCall) -> ToolResult: ...
    async def close(self) -> None: ...


# Every container of an in-process front names its process, so that a later
# front can tell whether it is still running (pid and start time: pids are reused).
LABEL_PID = "toolrt.mcp.pid"
LABEL_STARTED = "toolrt.mcp.started"


def process_labels() -> dict[str, str]:
    me = psutil.Process()
    return {LABEL_PID: str(me.pid), LABEL_STARTED: f"{me.create_time():.2f}"}


def process_alive(labels: dict[str, str]) -> bool:
    """Is the MCP front that made a container with these labels still running?"""
    try:
        process = psutil.Process(int(labels.get(LABEL_PID, "")))
        return f"{process.create_time():.2f}" == labels.get(LABEL_STARTED)
    except (ValueError, psutil.Error):
        return False


class LocalFront:
    """A daemon core in this process, and one session in it."""

    def __init__(self, config: Config) -> None:
        from runtime.core import build_core
        from runtime.sessions.manager import SessionRequest

        # Its session ends with the process: state in a directory of its own,
        # removed on close, and sessions closed on the way out.
        self._state_dir = tempfile.mkdtemp(prefix="toolrt-mcp-state-")
        labels = {**config.extra_labels, **process_labels()}
        config = config.model_copy(
            update={"state_dir": self._state_dir, "shutdown": "close", "extra_labels": labels}
        )
        self._core = build_core(config)
        self._request = SessionRequest()
        self._session_id = ""

    async def start(self) -> None:
        # What crashed MCP fronts left: nobody else would ever remove it.
        remove = getattr(self._core.backend, "remove_labelled", None)
        if remove is not None:
            with contextlib.suppress(ToolrtError):
                gone = await remove(LABEL_PID, process_alive)
                if gone:
                    log.warning("removed %d sandbox(es) of MCP fronts that are gone", gone)
        # The session lives as long as the connection: nothing reaps it meanwhile.
        await self._core.start(reap_expired=False)
        session = await self._core.manager.create(TENANT, self._request)
        self._session_id = session.id

    async def catalog(self) -> list[dict[str, Any]]:
        return self._core.registry.catalog()

    async def call(self, call: ToolCall) -> ToolResult:
        return await self._core.calls.execute(TENANT, self._session_id, call)

    async def close(self) -> None:
        try:
            await self._core.stop()
        finally:
            shutil.rmtree(self._state_dir, ignore_errors=True)


class RemoteFront:
    """A session on a running daemon, through the (blocking) client SDK."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._session_id = ""

    async def start(self) -> None:
        session = await asyncio.to_thread(self._client.create_session)
        self._session_id = session.id

    async def catalog(self) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._client.list_tools)

    async def call(self, call: ToolCall) -> ToolResult:
        result = await asyncio.to_thread(
            self._client.call, self._session_id, call.name, call.arguments_json, call.id
        )
        error = None if result.ok else ToolErrorInfo(result.error_code, result.error_message)
        return ToolResult(result.call_id, result.output, error, result.duration_ms)

    async def close(self) -> None:
        try:
            if self._session_id:
                await asyncio.to_thread(self._client.close_session, self._session_id)
        finally:
            self._client.close()


def build_server(front: ToolFront, ready: asyncio.Future[None]) -> Server[Any]:
    """The MCP server; tool calls wait for the session (`ready`) first."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        tools = mcp_dialect.catalog(await front.catalog())
        return mcp_types.ListToolsResult(tools=[mcp_types.Tool.model_validate(t) for t in tools])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        await ready
        arguments = json.dumps(params.arguments or {}, ensure_ascii=False)
        result = await front.call(ToolCall(uuid.uuid4().hex, params.name, arguments))
        return mcp_types.CallToolResult.model_validate(mcp_dialect.call_result(result))

    return Server("toolrt", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_mcp(front: ToolFront) -> None:
    """Serve one MCP connection on stdio; its session lives as long as it does."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    serving = asyncio.current_task()

    async def start() -> None:
        try:
            await front.start()
            ready.set_result(None)
        except Exception as exc:  # noqa: BLE001 - every call then reports it
            log.error("could not start a sandbox session: %s", exc)
            ready.set_exception(exc)

    def on_signal() -> None:
        if serving is not None:
            serving.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    starting = asyncio.ensure_future(start())
    server = build_server(front, ready)
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    except asyncio.CancelledError:
        log.info("signal received: closing the session")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        with contextlib.suppress(BaseException):
            await starting
        await front.close()
        if not ready.done():
            ready.cancel()
        elif not ready.cancelled():
            ready.exception()  # retrieved: logged once above
