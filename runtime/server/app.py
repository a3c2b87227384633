"""The gRPC daemon: `Daemon(core)` serves a core from `runtime.core` over gRPC."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime._proto.toolruntime.v1 import runtime_pb2_grpc as pb_grpc
from runtime.auth.credentials import Authenticator
from runtime.config import Config
from runtime.core import Core, build_core
from runtime.errors import AuditUnavailable
from runtime.server.auth import AuthInterceptor
from runtime.server.interceptor import ErrorInterceptor
from runtime.server.listeners import add_listeners, check_startup, server_credentials
from runtime.server.observing import ObservingInterceptor
from runtime.server.service import ToolRuntimeService

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ToolRuntime"].full_name
MAX_MESSAGE_BYTES = 64 << 20
# How often what the audit log counts (refused authentications, repeated network
# events) is written once its minute is over.
COUNTS_FLUSH_S = 5.0


class Daemon:
    """The gRPC server and the core it serves, started and stopped together."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.config = config = core.config
        check_startup(config)
        credentials = server_credentials(config.auth)
        self.authenticator = Authenticator(config.auth)
        self.server = grpc.aio.server(
            # Errors outermost, so a refused authentication is a status like any other;
            # observing outside authentication, so a refusal is counted and traced.
            interceptors=[
                ErrorInterceptor(),
                ObservingInterceptor(core.obs),
                AuthInterceptor(self.authenticator, core.audit),
            ],
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                # A second daemon on the same address must fail to bind, not
                # share the port and take half of the first one's clients.
                ("grpc.so_reuseport", 0),
            ],
        )
        pb_grpc.add_ToolRuntimeServicer_to_server(ToolRuntimeService(core), self.server)
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            [SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME], self.server
        )
        self.port = add_listeners(self.server, config, credentials)
        core.egress.listening_on(self.port)
        self._stopped = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.core.start()
        await self.server.start()
        serving = health_pb2.HealthCheckResponse.SERVING
        await self.health.set("", serving)
        await self.health.set(SERVICE_NAME, serving)
        self._flusher = asyncio.ensure_future(self._flush_counts())
        addresses = []
        if self.config.listen:
            addresses.append(self.config.listen.rsplit(":", 1)[0] + f":{self.port}")
        if self.config.unix_socket:
            addresses.append(f"unix:{self.config.unix_socket}")
        log.info("toolrt %s serving on %s", self.config.instance, " and ".join(addresses))

    async def stop(self, grace: float = 5.0) -> None:
        """Answer in-flight calls, close every session, then stop serving."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        await self.health.enter_graceful_shutdown()
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
        # The core first, while the server still carries the answers it gives.
        await self.core.stop()
        await self.server.stop(grace)
        # Refusals the server counted while it finished are written too.
        self.core.audit.close()
        log.info("toolrt %s stopped", self.config.instance)

    async def _flush_counts(self) -> None:
        while True:
            await asyncio.sleep(COUNTS_FLUSH_S)
            # A broken log keeps them and says so; the next RPC is refused anyway.
            with contextlib.suppress(AuditUnavailable):
                self.core.audit.flush_counts()

    async def wait(self) -> None:
        await self._stopped.wait()


async def serve(config: Config) -> None:
    """Run until SIGTERM/SIGINT, then shut down cleanly."""
    check_startup(config)  # before the engine is touched
    daemon = Daemon(build_core(config))
    await daemon.start()
    loop = asyncio.get_running_loop()
    stopping: asyncio.Future[None] = loop.create_future()

    def on_signal() -> None:
        if not stopping.done():
            stopping.set_result(None)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    await stopping
    log.info("signal received: answering in-flight calls and closing sessions")
    await daemon.stop()
