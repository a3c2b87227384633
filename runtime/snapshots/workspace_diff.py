"""workspace_diff: what changed in /workspace since the session started or since a snapshot."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runtime.constants import WORKSPACE
from runtime.errors import BadRequest, InvalidArguments, SnapshotNotFound
from runtime.policy.allowlist import is_within
from runtime.snapshots.diff import compare, workspace_now
from runtime.tools.base import Tool, ToolContext
from runtime.tools.paths import checked_path
from runtime.tools.validation import no_nul

# Headroom over the workspace's limit for the archive's headers.
ARCHIVE_SLACK = 16 << 20

DESCRIPTION = """\
Show what changed in /workspace: files added, modified and deleted since the \
session started (the default) or since a snapshot id ("snap_...") your \
operator took, with a unified diff for each changed text file. Use it to \
review your own work before finishing, or to see what a command changed. \
Binary files and files over 256 KiB are listed without a diff. A rename \
shows as a deletion and an addition. Only files are compared (not running \
processes, not empty directories); for one file's content use read_file.\
"""


class WorkspaceDiffArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    since: str | None = Field(
        None,
        description='"start" (the session\'s beginning) or a snapshot id "snap_...". '
        'Default: "start".',
    )
    path: str | None = Field(
        None, description="Only changes under this directory or file. Default: /workspace."
    )

    _path = field_validator("path")(no_nul)


async def run_workspace_diff(ctx: ToolContext, args: WorkspaceDiffArgs) -> dict[str, Any]:
    since = args.since or "start"
    if since != "start" and not since.startswith("snap_"):
        msg = f'since: expected "start" or a snapshot id starting with "snap_", got {since[:80]!r}'
        raise InvalidArguments(msg)
    root = WORKSPACE
    if args.path is not None:
        root, _ = await checked_path(ctx, args.path)
        if not is_within(root, WORKSPACE):
            msg = f"path: {args.path[:200]!r} is outside {WORKSPACE}; only it is compared"
            raise InvalidArguments(msg)
    if ctx.baseline is None:
        msg = "workspace_diff is not available in this daemon (no snapshot store)"
        raise InvalidArguments(msg)
    try:
        before, read_blob = await ctx.baseline(since)
    except (SnapshotNotFound, BadRequest) as exc:
        msg = f"since: {exc}"
        raise InvalidArguments(msg) from exc

    def wanted(path: str) -> bool:
        return is_within(path, root) and ctx.allowlist.allows(path)

    archive = ctx.agent.archive([WORKSPACE], ctx.limits.workspace_bytes + ARCHIVE_SLACK)
    now = await workspace_now(archive, WORKSPACE.strip("/"), before, wanted)
    budget = ctx.limits.output_cap_bytes
    return await asyncio.to_thread(compare, before, now, read_blob, WORKSPACE, wanted, budget)


WORKSPACE_DIFF = Tool(
    name="workspace_diff",
    description=DESCRIPTION,
    arguments=WorkspaceDiffArgs,
    run=run_workspace_diff,
    read_only=True,
    holds_workspace=True,
)
