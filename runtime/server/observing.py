"""The gRPC edge of observability: each RPC in a span and a log context."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from runtime.observability import Observability
from runtime.server.interceptor import HandlerInterceptor, Wrapper

# Probes and tooling, not work: no span, no log context.
UNOBSERVED = ("/grpc.health.", "/grpc.reflection.")


class ObservingInterceptor(HandlerInterceptor):
    def __init__(self, observability: Observability) -> None:
        self._obs = observability

    def wrappers(self, method: str) -> tuple[Wrapper, Wrapper] | None:
        if method.startswith(UNOBSERVED):
            return None
        obs = self._obs

        def scope(request: Any, context: Any) -> Any:
            session_id = getattr(request, "session_id", "")
            metadata = (context.invocation_metadata() or ()) if obs.tracing else ()
            return obs.rpc(method, metadata, session_id if isinstance(session_id, str) else "")

        def unary(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            async def observed(request: Any, context: Any) -> Any:
                with scope(request, context):
                    return await fn(request, context)

            return observed

        def stream(fn: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
            async def observed(request: Any, context: Any) -> AsyncIterator[Any]:
                with scope(request, context):
                    async for item in fn(request, context):
                        yield item

            return observed

        return unary, stream
