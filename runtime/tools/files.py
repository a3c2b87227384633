"""File tools: read_file, write_file, edit_file, list_files.

Every path is resolved by the sandbox's own kernel (the agent's `resolve`
op, as the sandbox user), checked against the session's allowlist, and then
opened by the agent without following any symlink, so a link swapped in
between the check and the open makes the call fail rather than escape.
read_file does both in one trip (Read.resolve): the agent resolves and reads,
and the resolved path is checked here before anything read is shown.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runtime.agent import protocol
from runtime.constants import WORKSPACE
from runtime.errors import InvalidArguments, PathDenied
from runtime.tools.base import Tool, ToolContext
from runtime.tools.network import NO_NETWORK
from runtime.tools.output import without_surrogates
from runtime.tools.paths import asked_path, check_resolved, checked_path
from runtime.tools.validation import no_nul

DEFAULT_READ_LINES = 2000
MAX_LIST_ENTRIES = 1000
# edit_file holds the whole file in memory, twice.
MAX_EDIT_BYTES = 16 << 20

PATHS = (
    "Paths are absolute or relative to /workspace; only paths this session's "
    "allowlist permits (by default /workspace) are readable/writable, and "
    "symlinks are resolved before that check (PATH_DENIED otherwise)."
)


class ReadFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="File to read, e.g. /workspace/src/app.py.")
    offset: int | None = Field(None, ge=1, description="First line to return, 1-based. Default: 1.")
    limit: int | None = Field(
        None, ge=1, description=f"Number of lines to return. Default: {DEFAULT_READ_LINES}."
    )

    _path = field_validator("path")(no_nul)


class WriteFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="File to create or replace.")
    content: str = Field(description="The complete new content of the file (UTF-8 text).")

    _path = field_validator("path")(no_nul)


class EditFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="File to edit.")
    old_string: str = Field(
        min_length=1,
        description="Exact text to replace, including whitespace and indentation; "
        "it must occur exactly once unless replace_all is true.",
    )
    new_string: str = Field(description="Text to put in its place.")
    replace_all: bool | None = Field(
        None, description="Replace every occurrence instead of exactly one. Default: false."
    )

    _path = field_validator("path")(no_nul)


class ListFilesArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(None, description="Directory to list. Default: /workspace.")
    recursive: bool | None = Field(
        None, description="Also list everything below subdirectories. Default: false."
    )

    _path = field_validator("path")(no_nul)


def refuse_hard_links(ctx: ToolContext, path: str, reply: protocol.ReadReply) -> None:
    """Deny globs name paths; a hard link gives a denied file a second name.

    So while deny globs are set, the file tools read no file with other
    links (what a glob cannot see, they do not show).
    """
    if ctx.allowlist.deny_globs and reply.links > 1:
        msg = (
            f"{path} has {reply.links - 1} other hard link(s); this session's deny globs "
            "are set, so file tools do not read hard-linked files (copy it instead)"
        )
        raise PathDenied(msg)


def decode_text(data: bytes, cut: bool) -> str | None:
    """UTF-8 text, or None for binary data (a cut may split one character)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if cut and exc.reason == "unexpected end of data":
            return data[: exc.start].decode("utf-8", errors="strict")
        return None


async def read_file(ctx: ToolContext, args: ReadFileArgs) -> dict[str, Any]:
    asked = asked_path(args.path)
    # One trip: the agent resolves and reads; the resolved path is checked
    # here before the content or the read's failure is shown.
    reply, body = await ctx.agent.read_resolved(
        protocol.Read(
            path=asked,
            offset=args.offset or 1,
            limit=args.limit or DEFAULT_READ_LINES,
            max_bytes=ctx.limits.output_cap_bytes,
            deadline_s=ctx.limits.call_timeout_s,
        ),
        lambda resolved: check_resolved(ctx, asked, resolved),
    )
    refuse_hard_links(ctx, reply.path, reply)
    text = None if reply.binary else decode_text(body, reply.truncated)
    return {
        "content": text or "",
        "total_lines": reply.total_lines,
        "truncated": reply.truncated,
        "binary": text is None,
    }


async def write_file(ctx: ToolContext, args: WriteFileArgs) -> dict[str, Any]:
    data = args.content.encode()
    # By call id: the agent keeps the answer, so a call a crashed daemon sent
    # is answered from it, not written again (WRITE_FILE is resumable).
    call_id, resume = ctx.call_id, ctx.resume
    path = asked_path(args.path)
    try:
        check_resolved(ctx, path, path, write=True)
    except PathDenied:
        pass  # it may resolve to an allowed path: checked below, as resolved
    else:
        # One trip to the agent: the path as checked, written unless a link
        # is on it (then nothing is, and it is resolved and checked first).
        reply = await ctx.agent.write(path, data, call_id, resume, exact=True)
        if not reply.resolve_first:
            return {"path": path, "bytes_written": reply.bytes_written}
    path, _ = await checked_path(ctx, args.path, write=True)
    reply = await ctx.agent.write(path, data, call_id, resume)
    return {"path": path, "bytes_written": reply.bytes_written}


def replace_exact(text: str, old: str, new: str, replace_all: bool, path: str) -> tuple[str, int]:
    """`text` with `old` replaced; refuses a missing or (unless replace_all) ambiguous match."""
    count = text.count(old)
    if count == 0:
        msg = (
            f"old_string was not found in {path} (0 matches); read the file and copy the "
            "exact text, including whitespace"
        )
        raise InvalidArguments(msg)
    if count > 1 and not replace_all:
        msg = (
            f"old_string occurs {count} times in {path}; include more surrounding text so it "
            "matches exactly once, or set replace_all to true"
        )
        raise InvalidArguments(msg)
    if old == new:
        msg = "old_string and new_string are identical: nothing would change"
        raise InvalidArguments(msg)
    return text.replace(old, new), count


def unified_diff(before: str, after: str, path: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a{path}",
        tofile=f"b{path}",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


async def edit_file(ctx: ToolContext, args: EditFileArgs) -> dict[str, Any]:
    resolved, _ = await checked_path(ctx, args.path, write=True)
    ctx.allowlist.check(resolved)  # edit_file reads the file too
    reply, data = await ctx.agent.read(
        # Unredacted: the content is written back (the diff is redacted).
        protocol.Read(path=resolved, raw=True, max_bytes=MAX_EDIT_BYTES, redact=False)
    )
    refuse_hard_links(ctx, resolved, reply)
    before = decode_text(data, cut=False)
    if before is None:
        msg = f"{resolved} is not UTF-8 text; edit_file only edits text files"
        raise InvalidArguments(msg)
    after, count = replace_exact(
        before, args.old_string, args.new_string, bool(args.replace_all), resolved
    )
    await ctx.agent.write(resolved, after.encode())
    diff = ctx.redactor.redact_text(unified_diff(before, after, resolved))
    return {"path": resolved, "replacements": count, "diff": diff}


async def list_files(ctx: ToolContext, args: ListFilesArgs) -> dict[str, Any]:
    resolved, kind = await checked_path(ctx, args.path or WORKSPACE)
    if kind and kind != "dir":
        msg = f"{resolved} is a {kind}, not a directory; use read_file for files"
        raise InvalidArguments(msg)
    listing = await ctx.agent.list_dir(
        resolved, bool(args.recursive), MAX_LIST_ENTRIES, ctx.limits.call_timeout_s
    )
    entries = []
    for entry in listing.entries:
        if ctx.allowlist.denied_by_glob(entry.path):
            continue
        item, replaced = without_surrogates(protocol.to_dict(entry))
        if replaced:
            # A name that is not UTF-8 is shown with U+FFFD; such a path
            # cannot be passed back to a tool as it is.
            item["invalid_utf8_replaced"] = True
        entries.append(item)
    return {"entries": entries, "truncated": listing.truncated}


READ_FILE = Tool(
    name="read_file",
    description=f"""\
Read a text file from the sandbox, by lines.

Use it to look at source, configs and logs before changing them. For a large \
file, page through it with offset (1-based first line) and limit (number of \
lines, default {DEFAULT_READ_LINES}); `total_lines` says how long it is and \
`truncated` whether more lines follow. Binary files are not returned as text: \
you get `binary: true` and empty content (inspect them with shell tools such \
as `file` or `xxd | head`). Not for directories: use list_files. {PATHS} \
{NO_NETWORK}""",
    arguments=ReadFileArgs,
    run=read_file,
    read_only=True,
)

WRITE_FILE = Tool(
    name="write_file",
    description=f"""\
Create a file or replace its whole content with `content` (UTF-8 text).

Parent directories are created. The replacement is atomic: readers see the \
old or the new file, never half of it. Use it for new files and complete \
rewrites; to change part of an existing file prefer edit_file, which does not \
need the whole file and shows a diff. The workspace is size-capped \
(LIMIT_EXCEEDED when full). {PATHS} {NO_NETWORK}""",
    arguments=WriteFileArgs,
    run=write_file,
    # The agent keeps its answer by call id: one journal commit, not two.
    resumable=True,
)

EDIT_FILE = Tool(
    name="edit_file",
    description=f"""\
Replace an exact piece of text in an existing file and get a unified diff.

`old_string` must match the file exactly (whitespace and indentation \
included) and occur exactly once; otherwise nothing changes and you get \
INVALID_ARGUMENTS with the number of matches — read the file and include more \
surrounding lines. Set replace_all to change every occurrence (e.g. a rename). \
Use write_file to create files or rewrite them whole. Text files only. \
{PATHS} {NO_NETWORK}""",
    arguments=EditFileArgs,
    run=edit_file,
)

LIST_FILES = Tool(
    name="list_files",
    description=f"""\
List a directory of the sandbox: each entry's path, type (file, dir, \
symlink, other) and size in bytes.

Use it to find your way around a project; `recursive: true` lists the whole \
tree below (at most {MAX_LIST_ENTRIES} entries, then `truncated` is true: \
list a subdirectory instead). Symlinks are listed, not followed. For \
searching file contents use shell with grep. {PATHS} {NO_NETWORK}""",
    arguments=ListFilesArgs,
    run=list_files,
    read_only=True,
)
