"""Requests whose bytes do not decode: INVALID_ARGUMENT, not grpcio's UNKNOWN.

grpcio (aio) decodes a request with the method handler's
`request_deserializer` before any handler or interceptor code runs, and
answers a decoding failure itself: `_handle_exceptions` in its
`server.pyx.pxi` turns the DecodeError into status UNKNOWN ("Unexpected
<class DecodeError>: ..."); for a client-streamed request the DecodeError
surfaces inside the handler's request iterator, where it would be an
unexpected error (INTERNAL). Both happen for bytes a client can send on
purpose or by bug: a string field that is not UTF-8, a cut length, a bad tag.

So the interceptor hands grpcio a deserializer that never raises: a request
that does not decode arrives as `Undecodable`, and `decoded` turns it into
`BadRequest` (INVALID_ARGUMENT) once the handler runs, where errors are mapped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from runtime.errors import BadRequest

Deserializer = Callable[[bytes], Any]


class Undecodable:
    """The stand-in for a request that did not decode; says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def error(self) -> BadRequest:
        return BadRequest(f"the request could not be decoded: {self.reason}")


def tolerant(deserialize: Deserializer | None) -> Deserializer | None:
    """`deserialize`, returning `Undecodable` where it would raise."""
    if deserialize is None:
        return None
    strict = deserialize

    def decode(data: bytes) -> Any:
        try:
            return strict(data)
        except Exception as exc:  # noqa: BLE001 - whatever the parser raises, the bytes are bad
            return Undecodable(f"{type(exc).__name__}: {exc}")

    return decode


async def _checked(messages: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for message in messages:
        if isinstance(message, Undecodable):
            raise message.error()
        yield message


def decoded(request: Any) -> Any:
    """A handler's request (or request stream) with undecodable messages refused."""
    if isinstance(request, Undecodable):
        raise request.error()
    if hasattr(request, "__aiter__"):
        return _checked(request)
    return request
