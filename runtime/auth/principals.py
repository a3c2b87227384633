"""Principals: who a call comes from, and what that lets it call."""

from __future__ import annotations

from dataclasses import dataclass

from runtime.config import tenant_name_problem
from runtime.errors import PermissionDenied, Unauthenticated

# Where a principal came from (its `kind`).
TOKEN = "token"
CERTIFICATE = "certificate"
UNIX = "unix"
# No authentication configured: a loopback or unix-socket caller.
LOCAL = "local"

# A client certificate names its tenant with this URI SAN prefix.
TENANT_URI_PREFIX = "toolrt://tenant/"

# Methods of the service that any authenticated principal may call (no session, no tool).
SESSIONLESS_METHODS = frozenset({"ListTools"})


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: what every RPC is scoped by."""

    tenant: str
    # Token id, certificate subject, "unix" or "local": what the audit log records.
    name: str
    kind: str
    # May call the Admin* RPCs, which see every tenant.
    admin: bool = False

    @property
    def runs_tools(self) -> bool:
        """Admin tokens only administer; every other principal uses sessions."""
        return not (self.admin and self.kind == TOKEN)

    def authorize(self, service: str, method: str) -> None:
        """PERMISSION_DENIED unless this principal may call `method` of `service`."""
        if not service.endswith("ToolRuntime") or method in SESSIONLESS_METHODS:
            return
        if method.startswith("Admin"):
            if not self.admin:
                msg = f"{method} needs an admin principal (toolrt tokens create --admin)"
                raise PermissionDenied(msg)
            return
        if not self.runs_tools:
            msg = (
                f"{method}: admin token {self.name} cannot use sessions or run tools; "
                "use a tenant's token"
            )
            raise PermissionDenied(msg)


def certificate_tenant(uris: list[str], common_name: str) -> str:
    """The tenant a verified client certificate names: its toolrt URI SAN, else its CN.

    UNAUTHENTICATED when it names none, several, or one that is no tenant name
    (a `/`, `..`, capitals or label-breaking characters).
    """
    named = {uri[len(TENANT_URI_PREFIX) :] for uri in uris if uri.startswith(TENANT_URI_PREFIX)}
    if len(named) > 1:
        msg = f"the client certificate names several tenants ({', '.join(sorted(named))[:200]})"
        raise Unauthenticated(msg, "certificate")
    if not named and not common_name:
        msg = f"the client certificate names no tenant: give it a URI SAN {TENANT_URI_PREFIX}NAME"
        raise Unauthenticated(msg, "certificate")
    tenant = named.pop() if named else common_name
    problem = tenant_name_problem(tenant)
    if problem:
        msg = f"the client certificate's tenant: {problem}"
        raise Unauthenticated(msg, "certificate")
    return tenant
