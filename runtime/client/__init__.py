"""A typed Python SDK over the gRPC stubs (what the `toolrt` CLI uses)."""

from runtime.client.sdk import TLS, Client, Result, SessionHandle, ToolrtRpcError

__all__ = ["TLS", "Client", "Result", "SessionHandle", "ToolrtRpcError"]
