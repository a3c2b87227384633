"""Values several modules must agree on, defined once.

What the daemon and the in-sandbox agent share (paths and the sandbox
user) is defined in `runtime/agent/protocol.py`, which the agent can import,
and re-exported here.
"""

from __future__ import annotations

from runtime.agent.protocol import SANDBOX_GID, SANDBOX_UID, TMP, WORKSPACE

# The tenant of callers when no authentication is configured, and of
# `[tenants.default]`: the table for tenants without their own.
DEFAULT_TENANT = "default"
DEFAULT_PORT = 50051
# Where the daemon listens, and the CLI and SDK connect, unless told otherwise.
DEFAULT_TARGET = f"127.0.0.1:{DEFAULT_PORT}"
# The sandbox's writable filesystems: what transfers may move, and the
# ceiling of every session's allowlist unless configured otherwise.
WRITABLE_AREAS = (WORKSPACE, TMP)

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_TARGET",
    "DEFAULT_TENANT",
    "SANDBOX_GID",
    "SANDBOX_UID",
    "TMP",
    "WORKSPACE",
    "WRITABLE_AREAS",
]

# Labels under toolrt.* are the daemon's, but for this one: an integration
# provider names the harness that made a session, so that its clean-up finds
# what that harness left (DESIGN, "Integrations").
INTEGRATION_LABEL = "toolrt.integration"


def client_label(key: str) -> bool:
    """Whether a request may set the label `key`."""
    return not key.startswith("toolrt.") or key == INTEGRATION_LABEL
