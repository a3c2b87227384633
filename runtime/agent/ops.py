"""The agent's operations by wire name.

Each family module (calls, background, files) registers its handlers here
with `@operation(RequestType)`; the loop decodes a request into its typed
message and calls the handler. A new operation is a new message in
protocol.py and a handler in a family module: the loop does not change.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Tuple, Type, TypeVar

from . import protocol

if TYPE_CHECKING:
    from .loop import Agent

M = TypeVar("M", bound=protocol.Message)
# (the agent, the request id, the typed request, the frame's body)
Handler = Callable[["Agent", int, Any, bytes], None]

OPERATIONS: Dict[str, Tuple[Type[protocol.Message], Handler]] = {}


def operation(
    request: Type[M],
) -> Callable[[Callable[[Agent, int, M, bytes], None]], Callable[[Agent, int, M, bytes], None]]:
    """Register the decorated function as the handler of `request`."""

    def register(
        handler: Callable[[Agent, int, M, bytes], None],
    ) -> Callable[[Agent, int, M, bytes], None]:
        if request.OP in OPERATIONS:
            msg = f"two handlers for op {request.OP!r}"
            raise RuntimeError(msg)
        OPERATIONS[request.OP] = (request, handler)
        return handler

    return register
