"""toolrt: a sandboxed remote tool-runtime daemon."""

__version__ = "0.1.0"
