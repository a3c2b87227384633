"""Building and running the daemon: `build_daemon(config, backend)`."""

from __future__ import annotations

import asyncio
import logging
import signal

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime._proto.toolruntime.v1 import runtime_pb2_grpc as pb_grpc
from runtime.config import Config
from runtime.sandbox.backend import SandboxBackend
from runtime.server.interceptor import ErrorInterceptor
from runtime.server.service import ToolRuntimeService
from runtime.sessions.manager import SessionManager
from runtime.sessions.reaper import Reaper
from runtime.tools.registry import Registry, default_registry

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ToolRuntime"].full_name
MAX_MESSAGE_BYTES = 64 << 20


class Daemon:
    """The gRPC server, the session manager and the backend, started together."""

    def __init__(self, config: Config, backend: SandboxBackend, registry: Registry) -> None:
        self.config = config
        self.backend = backend
        self.manager = SessionManager(config, backend, registry)
        self.reaper = Reaper(
            self.manager.live_sessions, self.manager.expire, config.reaper_interval_s
        )
        self.server = grpc.aio.server(
            interceptors=[ErrorInterceptor()],
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        pb_grpc.add_ToolRuntimeServicer_to_server(ToolRuntimeService(self.manager), self.server)
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            [SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME], self.server
        )
        self.port = 0
        if config.listen:
            self.port = self.server.add_insecure_port(config.listen)
            if self.port == 0:
                msg = f"cannot listen on {config.listen}"
                raise OSError(msg)
        if config.unix_socket:
            self.server.add_insecure_port(f"unix:{config.unix_socket}")
        self._stopped = asyncio.Event()

    async def start(self) -> None:
        await self.manager.start()
        self.reaper.start()
        await self.server.start()
        serving = health_pb2.HealthCheckResponse.SERVING
        await self.health.set("", serving)
        await self.health.set(SERVICE_NAME, serving)
        log.info(
            "toolrt %s serving on %s%s",
            self.config.instance,
            self.config.listen.rsplit(":", 1)[0] + f":{self.port}" if self.config.listen else "",
            f" and unix:{self.config.unix_socket}" if self.config.unix_socket else "",
        )

    async def stop(self, grace: float = 5.0) -> None:
        """Answer in-flight calls, close every session, then stop serving."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        await self.health.enter_graceful_shutdown()
        await self.reaper.stop()
        await self.manager.shutdown()
        await self.server.stop(grace)
        await self.backend.close()
        log.info("toolrt %s stopped", self.config.instance)

    async def wait(self) -> None:
        await self._stopped.wait()


def build_daemon(
    config: Config, backend: SandboxBackend | None = None, registry: Registry | None = None
) -> Daemon:
    if backend is None:
        from runtime.sandbox.docker.backend import DockerBackend

        backend = DockerBackend(config)
    return Daemon(config, backend, registry or default_registry())


async def serve(config: Config) -> None:
    """Run until SIGTERM/SIGINT, then shut down cleanly."""
    daemon = build_daemon(config)
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
