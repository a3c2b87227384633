"""Paths a tool is given: refused unless the session's allowlist permits
what they resolve to in the sandbox (every tool that takes a path uses
these; CONTRIBUTING's "Adding a tool")."""

from __future__ import annotations

from runtime.errors import InvalidArguments
from runtime.policy.allowlist import normalize
from runtime.tools.base import ToolContext
from runtime.tools.validation import path_too_long


def refuse_long_path(path: str, field: str, via: str = "") -> None:
    """INVALID_ARGUMENTS for a path the sandbox's kernel would refuse as too long."""
    problem = path_too_long(path)
    if problem is not None:
        msg = f"/{field}{via} {problem}; use a shorter path"
        raise InvalidArguments(msg)


def asked_path(path: str, field: str = "path") -> str:
    """`path` normalized, refused if the sandbox's kernel would find it too long."""
    asked = normalize(path)
    for candidate in (path, asked):
        refuse_long_path(candidate, field)
    return asked


def check_resolved(
    ctx: ToolContext, asked: str, resolved: str, write: bool = False, field: str = "path"
) -> None:
    """Refuse what `asked` resolved to unless the allowlist permits it and the
    kernel's length limits allow it."""
    refuse_long_path(resolved, field, via=" resolves to a path that")
    ctx.allowlist.check(resolved, write=write, asked=asked)


async def checked_path(
    ctx: ToolContext, path: str, write: bool = False, field: str = "path"
) -> tuple[str, str]:
    """(resolved path, its type or "" when missing), allowed by the session's
    allowlist and within the kernel's length limits (`field` names the argument)."""
    asked = asked_path(path, field)
    [item] = await ctx.agent.resolve([asked])
    check_resolved(ctx, asked, item.path, write, field)
    return item.path, item.type
