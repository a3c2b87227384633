"""Domain errors → gRPC status, for every RPC, in one place."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from runtime.errors import RequestError

log = logging.getLogger(__name__)


async def _abort(context: grpc.aio.ServicerContext, exc: Exception) -> None:
    if isinstance(exc, RequestError):
        await context.abort(exc.status, str(exc))
    correlation = uuid.uuid4().hex[:12]
    log.error("unexpected error [%s]", correlation, exc_info=exc)
    await context.abort(grpc.StatusCode.INTERNAL, f"internal error; correlation id {correlation}")


def _wrap_unary(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def handler(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await fn(request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - every error becomes a status
            await _abort(context, exc)

    return handler


def _wrap_stream(fn: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    async def handler(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            async for item in fn(request, context):
                yield item
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - every error becomes a status
            await _abort(context, exc)

    return handler


Wrapper = Callable[[Callable[..., Any]], Callable[..., Any]]


def rewrap(
    handler: grpc.RpcMethodHandler, unary: Wrapper, stream: Wrapper
) -> grpc.RpcMethodHandler:
    """`handler` with its behaviour wrapped: `unary` for single replies, `stream` for streams."""
    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(unary(handler.unary_unary), **kwargs)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(stream(handler.unary_stream), **kwargs)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(unary(handler.stream_unary), **kwargs)
    if handler.stream_stream:
        return grpc.stream_stream_rpc_method_handler(stream(handler.stream_stream), **kwargs)
    return handler


class HandlerInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Wraps each method's handler with the (unary, stream) pair `wrappers` gives for it."""

    def wrappers(self, method: str) -> tuple[Wrapper, Wrapper] | None:
        """How to wrap `method` ("/package.Service/Method"); None leaves it as it is."""
        raise NotImplementedError

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        wrappers = self.wrappers(details.method) if handler is not None else None
        return handler if wrappers is None else rewrap(handler, *wrappers)


class ErrorInterceptor(HandlerInterceptor):
    def wrappers(self, method: str) -> tuple[Wrapper, Wrapper]:
        return _wrap_unary, _wrap_stream
