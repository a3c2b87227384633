"""Domain errors → gRPC status, for every RPC, in one place."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import any_pb2  # type: ignore[import-untyped]
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from runtime.descriptors import EXHAUSTION, out_of_descriptors
from runtime.errors import RequestError
from runtime.server.decoding import decoded, tolerant

log = logging.getLogger(__name__)

# Status details travel in a trailer that clients cap (grpcio: 8 KiB by
# default, after percent-encoding every non-ASCII byte as three): a message
# quoting a huge argument back must not turn NOT_FOUND into RESOURCE_EXHAUSTED.
MAX_DETAILS_BYTES = 1024
# google.rpc.ErrorInfo's domain on every status that names a reason.
ERROR_DOMAIN = "toolrt"
OUT_OF_DESCRIPTORS = (
    "the daemon is out of file descriptors for the moment (RLIMIT_NOFILE); retry shortly"
)


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


def with_reason(code: grpc.StatusCode, details: str, reason: str) -> grpc.Status:
    """A status carrying google.rpc.ErrorInfo{domain: "toolrt", reason} in its details."""
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(domain=ERROR_DOMAIN, reason=reason))
    status = status_pb2.Status(code=code.value[0], message=details, details=[info])
    return rpc_status.to_status(status)


async def _abort(context: grpc.aio.ServicerContext, exc: Exception) -> None:
    if isinstance(exc, RequestError):
        details = capped(str(exc))
        if not exc.error_reason:
            await context.abort(exc.status, details)
        status = with_reason(exc.status, details, exc.error_reason)
        await context.abort(status.code, status.details, status.trailing_metadata)
    if out_of_descriptors(exc):
        # Exhaustion, not a bug: retryable, and logged once a minute.
        EXHAUSTION.note("an RPC", exc)
        await context.abort(grpc.StatusCode.UNAVAILABLE, OUT_OF_DESCRIPTORS)
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


Wrapper = Callable[[Callable[..., Any]], Callable[..., Any]]


def rewrap(
    handler: grpc.RpcMethodHandler, unary: Wrapper, stream: Wrapper, tolerate: bool = False
) -> grpc.RpcMethodHandler:
    """`handler` with its behaviour wrapped: `unary` for single replies, `stream` for streams;
    with `tolerate`, a request that does not decode arrives as a marker (decoding.py)."""
    deserializer = handler.request_deserializer
    kwargs = {
        "request_deserializer": tolerant(deserializer) if tolerate else deserializer,
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

    tolerates_undecodable = False

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
        if wrappers is None:
            return handler
        return rewrap(handler, *wrappers, tolerate=self.tolerates_undecodable)


class ErrorInterceptor(HandlerInterceptor):
    # The outermost interceptor: request bytes that do not decode reach its
    # wrappers as a marker and end as INVALID_ARGUMENT, not grpcio's own status.
    tolerates_undecodable = True

    def wrappers(self, method: str) -> tuple[Wrapper, Wrapper]:
        return _wrap_unary, _wrap_stream
