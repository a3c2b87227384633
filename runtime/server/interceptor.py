"""Domain errors → gRPC status, for every RPC, in one place."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from runtime.errors import RequestError
from runtime.server.decoding import decoded, tolerant

log = logging.getLogger(__name__)

# Status details travel in a trailer that clients cap (grpcio: 8 KiB by
# default, after percent-encoding every non-ASCII byte as three): a message
# quoting a huge argument back must not turn NOT_FOUND into RESOURCE_EXHAUSTED.
MAX_DETAILS_BYTES = 1024


def capped(details: str) -> str:
    """`details` within MAX_DETAILS_BYTES: its start and its end (which says
    what was expected), the middle left out."""
    data = details.encode("utf-8", "replace")  # a lone surrogate could not be sent
    if len(data) <= MAX_DETAILS_BYTES:
        return data.decode("utf-8")
    keep = MAX_DETAILS_BYTES // 2
    head = data[:keep].decode("utf-8", "ignore")
    tail = data[-keep:].decode("utf-8", "ignore")
    return f"{head} ...[{len(data) - 2 * keep} bytes left out]... {tail}"


async def _abort(context: grpc.aio.ServicerContext, exc: Exception) -> None:
    if isinstance(exc, RequestError):
        await context.abort(exc.status, capped(str(exc)))
    correlation = uuid.uuid4().hex[:12]
    log.error("unexpected error [%s]", correlation, exc_info=exc)
    await context.abort(grpc.StatusCode.INTERNAL, f"internal error; correlation id {correlation}")


def _wrap_unary(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def handler(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await fn(decoded(request), context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - every error becomes a status
            await _abort(context, exc)

    return handler


def _wrap_stream(fn: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    async def handler(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            async for item in fn(decoded(request), context):
                yield item
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - every error becomes a status
            await _abort(context, exc)

    return handler


class ErrorInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return None
        kwargs = {
            "request_deserializer": tolerant(handler.request_deserializer),
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(_wrap_unary(handler.unary_unary), **kwargs)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                _wrap_stream(handler.unary_stream), **kwargs
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(_wrap_unary(handler.stream_unary), **kwargs)
        if handler.stream_stream:
            return grpc.stream_stream_rpc_method_handler(
                _wrap_stream(handler.stream_stream), **kwargs
            )
        return handler
