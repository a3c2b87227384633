"""How a failed RPC becomes an exception, for every client (sync and async).

ToolrtRpcError carries the status code, its details and the daemon's
`reason` (google.rpc.ErrorInfo in the status details, domain "toolrt").
Reasons a program expects as OS errors are also the matching built-in:
FILE_NOT_FOUND is a FileNotFoundError, IS_A_DIRECTORY an IsADirectoryError,
NOT_A_DIRECTORY a NotADirectoryError, PERMISSION_DENIED and USER_NOT_ALLOWED
a PermissionError, FILE_EXISTS a FileExistsError, TIMEOUT a TimeoutError.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

ERROR_DOMAIN = "toolrt"


class ToolrtRpcError(Exception):
    """An RPC failed with a gRPC status (not a tool failure: see Result.error);
    `reason` is the daemon's ErrorInfo reason ("" when it named none)."""

    def __init__(self, code: grpc.StatusCode, details: str, reason: str = "") -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.reason = reason


class RemoteFileNotFoundError(ToolrtRpcError, FileNotFoundError):
    pass


class RemoteIsADirectoryError(ToolrtRpcError, IsADirectoryError):
    pass


class RemoteNotADirectoryError(ToolrtRpcError, NotADirectoryError):
    pass


class RemotePermissionError(ToolrtRpcError, PermissionError):
    pass


class RemoteFileExistsError(ToolrtRpcError, FileExistsError):
    pass


class RemoteTimeoutError(ToolrtRpcError, TimeoutError):
    pass


BY_REASON: dict[str, type[ToolrtRpcError]] = {
    "FILE_NOT_FOUND": RemoteFileNotFoundError,
    "IS_A_DIRECTORY": RemoteIsADirectoryError,
    "NOT_A_DIRECTORY": RemoteNotADirectoryError,
    "PERMISSION_DENIED": RemotePermissionError,
    "USER_NOT_ALLOWED": RemotePermissionError,
    "FILE_EXISTS": RemoteFileExistsError,
    "TIMEOUT": RemoteTimeoutError,
}


def reason_of(exc: grpc.RpcError) -> str:
    """The ErrorInfo reason in a failed call's status details ("" if none)."""
    try:
        status = rpc_status.from_call(exc)
    except (ValueError, AttributeError):
        return ""
    for detail in status.details if status is not None else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Is(info.DESCRIPTOR) and detail.Unpack(info) and info.domain == ERROR_DOMAIN:
            return str(info.reason)
    return ""


def error_of(exc: grpc.RpcError) -> ToolrtRpcError:
    """The client's exception for a failed call, by the reason the daemon gave."""
    reason = reason_of(exc)
    cls = BY_REASON.get(reason, ToolrtRpcError)
    return cls(exc.code(), exc.details() or "", reason)


@contextmanager
def rpc_errors() -> Iterator[None]:
    """Raise a failed RPC (sync or async, unary or stream) as ToolrtRpcError."""
    try:
        yield
    except grpc.RpcError as exc:
        raise error_of(exc) from exc
