"""A typed Python SDK over the gRPC stubs (what the `toolrt` CLI uses)."""

from runtime.client.errors import (
    RemoteFileExistsError,
    RemoteFileNotFoundError,
    RemoteIsADirectoryError,
    RemoteNotADirectoryError,
    RemotePermissionError,
    RemoteTimeoutError,
    ToolrtRpcError,
)
from runtime.client.programs import ExecResult, ExecStream
from runtime.client.sdk import TLS, Client, Result, SessionHandle

__all__ = [
    "TLS",
    "Client",
    "ExecResult",
    "ExecStream",
    "RemoteFileExistsError",
    "RemoteFileNotFoundError",
    "RemoteIsADirectoryError",
    "RemoteNotADirectoryError",
    "RemotePermissionError",
    "RemoteTimeoutError",
    "Result",
    "SessionHandle",
    "ToolrtRpcError",
]
