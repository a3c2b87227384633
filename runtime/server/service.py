"""The ToolRuntime servicer: each method converts, calls the domain, converts back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime._proto.toolruntime.v1 import runtime_pb2_grpc as pb_grpc
from runtime.constants import DEFAULT_TENANT
from runtime.core import Core
from runtime.dialects import registry as dialects
from runtime.models import ToolResult
from runtime.server import convert

# Until authentication lands every caller is this tenant.


def tenant_of(context: grpc.aio.ServicerContext) -> str:
    return DEFAULT_TENANT


async def _not_yet(context: grpc.aio.ServicerContext, name: str) -> None:
    await context.abort(
        grpc.StatusCode.UNIMPLEMENTED, f"{name} is not available in this version of toolrt"
    )


class ToolRuntimeService(pb_grpc.ToolRuntimeServicer):
    def __init__(self, core: Core) -> None:
        self._manager = core.manager
        self._calls = core.calls
        self._transfers = core.transfers
        self._registry = core.registry

    async def CreateSession(
        self, request: pb.CreateSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.Session:
        session = await self._manager.create(
            tenant_of(context), convert.session_request_from_pb(request)
        )
        return convert.session_to_pb(session)

    async def GetSession(
        self, request: pb.GetSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.Session:
        return convert.session_to_pb(self._manager.get(tenant_of(context), request.session_id))

    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSessionsResponse:
        sessions = self._manager.sessions_of(tenant_of(context))
        return pb.ListSessionsResponse(sessions=[convert.session_to_pb(s) for s in sessions])

    async def CloseSession(
        self, request: pb.CloseSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CloseSessionResponse:
        state = await self._manager.close(tenant_of(context), request.session_id)
        return pb.CloseSessionResponse(session_id=request.session_id, state=state)

    async def ListTools(
        self, request: pb.ListToolsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListToolsResponse:
        allow = None
        if request.session_id:
            session = self._manager.get(tenant_of(context), request.session_id)
            allow = session.network.allow_texts()
        tools_json = dialects.export_catalog(request.dialect, self._registry.catalog(allow))
        return pb.ListToolsResponse(tools_json=tools_json)

    async def Execute(
        self, request: pb.ExecuteRequest, context: grpc.aio.ServicerContext
    ) -> pb.ToolResult:
        result = await self._calls.execute(
            tenant_of(context), request.session_id, convert.call_from_pb(request.call)
        )
        return convert.result_to_pb(result)

    async def ExecuteBatch(
        self, request: pb.ExecuteBatchRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExecuteBatchResponse:
        calls = [convert.call_from_pb(c) for c in request.calls]
        results = await self._calls.execute_batch(tenant_of(context), request.session_id, calls)
        return pb.ExecuteBatchResponse(results=[convert.result_to_pb(r) for r in results])

    async def ExecuteStream(
        self, request: pb.ExecuteRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ExecuteEvent]:
        events: asyncio.Queue[pb.ExecuteEvent] = asyncio.Queue()

        def on_output(stream: str, chunk: bytes) -> None:
            if stream == "stderr":
                events.put_nowait(pb.ExecuteEvent(stderr=chunk))
            else:
                events.put_nowait(pb.ExecuteEvent(stdout=chunk))

        task: asyncio.Task[ToolResult] = asyncio.ensure_future(
            self._calls.execute(
                tenant_of(context),
                request.session_id,
                convert.call_from_pb(request.call),
                on_output=on_output,
            )
        )
        getter: asyncio.Future[pb.ExecuteEvent] | None = None
        try:
            while not task.done() or not events.empty():
                getter = asyncio.ensure_future(events.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result()
                else:
                    getter.cancel()
            yield pb.ExecuteEvent(result=convert.result_to_pb(task.result()))
        finally:
            # The client may go away mid-call: stop the call and the pending read.
            if getter is not None and not getter.done():
                getter.cancel()
            if not task.done():
                task.cancel()

    async def ExecuteMessage(
        self, request: pb.ExecuteMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExecuteMessageResponse:
        calls = dialects.parse_message(request.dialect, request.message_json)
        results = await self._calls.execute_batch(tenant_of(context), request.session_id, calls)
        return pb.ExecuteMessageResponse(
            results_json=dialects.render_results(request.dialect, calls, results),
            results=[convert.result_to_pb(r) for r in results],
        )

    async def UploadFiles(
        self, request_iterator: AsyncIterator[pb.UploadFilesRequest], context: Any
    ) -> pb.UploadFilesResponse:
        session_id, dest, data = await convert.upload_from_pb(request_iterator)
        files, size = await self._transfers.upload(tenant_of(context), session_id, dest, data)
        return pb.UploadFilesResponse(files=files, bytes=size)

    async def DownloadFiles(
        self, request: pb.DownloadFilesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.DownloadFilesChunk]:
        chunks = self._transfers.download(
            tenant_of(context), request.session_id, list(request.paths)
        )
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                yield pb.DownloadFilesChunk(tar=chunk)
