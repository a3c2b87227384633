"""Fronts beside the gRPC server that drive the same core (today: MCP on stdio)."""
