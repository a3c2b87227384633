"""A typed Python SDK over the gRPC stubs (what the `toolrt` CLI uses)."""

from runtime.client.sdk import Client, Result, SessionHandle, ToolrtRpcError

__all__ = ["Client", "Result", "SessionHandle", "ToolrtRpcError"]
