"""The ToolRuntime servicer: each method converts, calls the domain, converts back.

Every method runs as the principal `AuthInterceptor` found (its tenant
scopes every session it names) and leaves its audit records before it
answers; `audit.guard` refuses it while the audit log cannot be written.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from runtime import cpu
from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime._proto.toolruntime.v1 import runtime_pb2_grpc as pb_grpc
from runtime.core import Core
from runtime.dialects import registry as dialects
from runtime.errors import AuditUnavailable
from runtime.models import ToolResult
from runtime.queued import queued_until_done
from runtime.server import convert
from runtime.server.auth import principal_of
from runtime.server.programs import ProgramRpcs


class ToolRuntimeService(ProgramRpcs, pb_grpc.ToolRuntimeServicer):
    def __init__(self, core: Core) -> None:
        self._manager = core.manager
        self._calls = core.calls
        self._transfers = core.transfers
        self._registry = core.registry
        self._audit = core.audit
        self._admin = core.admin
        self._snapshots = core.snapshots
        self._programs = core.programs

    async def CreateSession(
        self, request: pb.CreateSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.Session:
        who = principal_of(context)
        with self._audit.guard("session.create", who, ""):
            asked = convert.session_request_from_pb(request)
            if request.from_snapshot:
                session = await self._snapshots.create_from(
                    who.tenant, asked, request.from_snapshot
                )
            else:
                session = await self._manager.create(who.tenant, asked)
                await self._snapshots.started(session, bool(asked.workspace_tar))
        try:
            self._audit.session("session.create", who, session.id, image=session.image)
        except BaseException:
            # Unrecorded, the session must not exist: nobody could account for it.
            # (Its records wait in the audit log's memory until they can be written.)
            await self._manager.close(who.tenant, session.id)
            with contextlib.suppress(AuditUnavailable):
                self._audit.session("session.close", who, session.id, reason="unrecorded")
            raise
        return convert.session_to_pb(session)

    async def GetSession(
        self, request: pb.GetSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.Session:
        info = await self._manager.describe(principal_of(context).tenant, request.session_id)
        return convert.info_to_pb(info)

    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSessionsResponse:
        await self._manager.adoption_done()
        sessions = self._manager.sessions_of(principal_of(context).tenant)
        return pb.ListSessionsResponse(sessions=[convert.session_to_pb(s) for s in sessions])

    async def CloseSession(
        self, request: pb.CloseSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CloseSessionResponse:
        who = principal_of(context)
        with self._audit.guard("session.close", who, request.session_id):
            state = await self._manager.close(who.tenant, request.session_id)
        self._audit.session("session.close", who, request.session_id, reason="closed")
        return pb.CloseSessionResponse(session_id=request.session_id, state=state)

    async def ListTools(
        self, request: pb.ListToolsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListToolsResponse:
        allow = None
        if request.session_id:
            session = await self._manager.lookup(principal_of(context).tenant, request.session_id)
            allow = session.network.allow_texts()
        tools_json = dialects.export_catalog(request.dialect, self._registry.catalog(allow))
        return pb.ListToolsResponse(tools_json=tools_json)

    async def Execute(
        self, request: pb.ExecuteRequest, context: grpc.aio.ServicerContext
    ) -> pb.ToolResult:
        who, call = principal_of(context), convert.call_from_pb(request.call)
        with self._audit.guard("call", who, request.session_id, [call]):
            result = await self._calls.execute(who.tenant, request.session_id, call)
        await self._audit.record_calls(who, request.session_id, [call], [result])
        return convert.result_to_pb(result)

    async def ExecuteBatch(
        self, request: pb.ExecuteBatchRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExecuteBatchResponse:
        who, calls = principal_of(context), [convert.call_from_pb(c) for c in request.calls]
        with self._audit.guard("call", who, request.session_id, calls):
            results = await self._calls.execute_batch(who.tenant, request.session_id, calls)
        await self._audit.record_calls(who, request.session_id, calls, results)
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

        who, call = principal_of(context), convert.call_from_pb(request.call)
        self._audit.check()
        task: asyncio.Task[ToolResult] = asyncio.ensure_future(
            self._calls.execute(who.tenant, request.session_id, call, on_output=on_output)
        )
        try:
            async for event in queued_until_done(task, events):
                yield event
            with self._audit.guard("call", who, request.session_id, [call]):
                result = task.result()
            await self._audit.record_calls(who, request.session_id, [call], [result])
            yield pb.ExecuteEvent(result=convert.result_to_pb(result))
        finally:
            # The client may go away mid-call: stop the call.
            if not task.done():
                task.cancel()

    async def ExecuteMessage(
        self, request: pb.ExecuteMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExecuteMessageResponse:
        who = principal_of(context)
        # A large message is parsed off the event loop.
        text = request.message_json
        calls = await cpu.compute(len(text), dialects.parse_message, request.dialect, text)
        with self._audit.guard("call", who, request.session_id, calls):
            results = await self._calls.execute_batch(who.tenant, request.session_id, calls)
        await self._audit.record_calls(who, request.session_id, calls, results)
        return pb.ExecuteMessageResponse(
            results_json=dialects.render_results(request.dialect, calls, results),
            results=[convert.result_to_pb(r) for r in results],
        )

    async def UploadFiles(
        self, request_iterator: AsyncIterator[pb.UploadFilesRequest], context: Any
    ) -> pb.UploadFilesResponse:
        who = principal_of(context)
        self._audit.check()
        session_id, dest, chunks = await convert.upload_from_pb(request_iterator)
        started = time.monotonic()
        async with contextlib.aclosing(chunks):
            with self._audit.guard("upload", who, session_id):
                files, size = await self._transfers.upload(who.tenant, session_id, dest, chunks)
        self._audit.transfer("upload", who, session_id, started, files=files, bytes=size)
        return pb.UploadFilesResponse(files=files, bytes=size)

    async def DownloadFiles(
        self, request: pb.DownloadFilesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.DownloadFilesChunk]:
        who, started, size = principal_of(context), time.monotonic(), 0
        chunks = self._transfers.download(who.tenant, request.session_id, list(request.paths))
        with self._audit.guard("download", who, request.session_id):
            async with contextlib.aclosing(chunks):
                async for chunk in chunks:
                    size += len(chunk)
                    yield pb.DownloadFilesChunk(tar=chunk)
        # Written before the stream ends: the client has no complete archive without it.
        self._audit.transfer("download", who, request.session_id, started, bytes=size)

    # -- snapshots ----------------------------------------------------------
    async def SnapshotSession(
        self, request: pb.SnapshotSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.Snapshot:
        who, started = principal_of(context), time.monotonic()
        with self._audit.guard("snapshot", who, request.session_id):
            snapshot = await self._snapshots.snapshot(
                who.tenant, request.session_id, request.label, request.include_tmp
            )
        self._audit.transfer(
            "snapshot",
            who,
            request.session_id,
            started,
            action="take",
            snapshot_id=snapshot.id,
            files=snapshot.files,
            bytes=snapshot.bytes,
        )
        return convert.snapshot_to_pb(snapshot)

    async def ForkSession(
        self, request: pb.ForkSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.ForkSessionResponse:
        who, started = principal_of(context), time.monotonic()
        with self._audit.guard("snapshot", who, request.session_id):
            sessions = await self._snapshots.fork(
                who.tenant, request.session_id, request.snapshot_id, request.count
            )
        try:
            for session in sessions:
                self._audit.session("session.create", who, session.id, image=session.image)
            self._audit.transfer(
                "snapshot",
                who,
                request.session_id,
                started,
                action="fork",
                snapshot_id=request.snapshot_id,
                sessions=[s.id for s in sessions],
            )
        except BaseException:
            # As CreateSession: unrecorded sessions must not exist.
            for session in sessions:
                await self._manager.close(who.tenant, session.id)
            raise
        return pb.ForkSessionResponse(sessions=[convert.session_to_pb(s) for s in sessions])

    async def RestoreSession(
        self, request: pb.RestoreSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.RestoreSessionResponse:
        who, started = principal_of(context), time.monotonic()
        with self._audit.guard("snapshot", who, request.session_id):
            restored = await self._snapshots.restore(
                who.tenant, request.session_id, request.snapshot_id
            )
        self._audit.transfer(
            "snapshot",
            who,
            request.session_id,
            started,
            action="restore",
            snapshot_id=request.snapshot_id,
        )
        return pb.RestoreSessionResponse(
            session=convert.session_to_pb(restored.session),
            stopped_process_ids=restored.stopped_process_ids,
            stopped_other_processes=restored.stopped_other_processes,
        )

    async def ListSnapshots(
        self, request: pb.ListSnapshotsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSnapshotsResponse:
        snapshots = await self._snapshots.listed(principal_of(context).tenant)
        return pb.ListSnapshotsResponse(snapshots=[convert.snapshot_to_pb(s) for s in snapshots])

    async def DeleteSnapshot(
        self, request: pb.DeleteSnapshotRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteSnapshotResponse:
        who, started = principal_of(context), time.monotonic()
        with self._audit.guard("snapshot", who, ""):
            await self._snapshots.delete(who.tenant, request.snapshot_id)
        self._audit.transfer(
            "snapshot", who, "", started, action="delete", snapshot_id=request.snapshot_id
        )
        return pb.DeleteSnapshotResponse()

    # -- operators (an admin principal only: AuthInterceptor checks) ------------
    async def AdminStats(
        self, request: pb.AdminStatsRequest, context: grpc.aio.ServicerContext
    ) -> pb.AdminStatsResponse:
        return convert.admin_stats_to_pb(await self._admin.stats())

    async def AdminListSessions(
        self, request: pb.AdminListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.AdminListSessionsResponse:
        views = await self._admin.sessions(request.tenant, request.usage)
        return pb.AdminListSessionsResponse(
            sessions=[convert.admin_session_to_pb(view) for view in views]
        )
