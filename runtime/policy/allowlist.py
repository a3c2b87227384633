"""Path allowlists: which sandbox paths the file tools may read and write.

Pure logic. Paths given to `PathPolicy.check` are the *resolved* paths the
sandbox reported (symlinks and `..` already followed by its own kernel), so
a containment test on them is a plain component-wise prefix test:
`/workspace-evil` is not below `/workspace`.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from runtime.constants import WORKSPACE
from runtime.errors import BadRequest, PathDenied

DEFAULT_ROOTS = (WORKSPACE,)
MAX_GLOBS = 64
MAX_ROOTS = 32


@dataclass
class Allowlist:
    """The paths a session asks for (CreateSession's `allowlist`), before
    `session_policy` checks them into its `PathPolicy`."""

    read_roots: list[str] = field(default_factory=lambda: [WORKSPACE])
    write_roots: list[str] = field(default_factory=lambda: [WORKSPACE])
    deny_globs: list[str] = field(default_factory=list)


def normalize(path: str, base: str = WORKSPACE) -> str:
    """An absolute, lexically normalized path (relative paths are below `base`)."""
    joined = posixpath.join(base, path)
    norm = posixpath.normpath(joined)
    # normpath keeps a leading '//' (POSIX allows it a meaning); we do not.
    return "/" + norm.lstrip("/")


def is_within(path: str, root: str) -> bool:
    """Component-wise containment of normalized absolute paths."""
    if root == "/":
        return True
    return path == root or path.startswith(root + "/")


def _ancestors(path: str) -> Iterable[str]:
    while True:
        yield path
        if path == "/":
            return
        path = posixpath.dirname(path)


@dataclass(frozen=True)
class PathPolicy:
    read_roots: tuple[str, ...] = DEFAULT_ROOTS
    write_roots: tuple[str, ...] = DEFAULT_ROOTS
    deny_globs: tuple[str, ...] = field(default_factory=tuple)

    def denied_by_glob(self, path: str) -> str | None:
        """The deny glob matching `path` or one of its ancestors, if any."""
        for candidate in _ancestors(path):
            for glob in self.deny_globs:
                if fnmatch.fnmatchcase(candidate, glob):
                    return glob
        return None

    def allows(self, path: str, write: bool = False) -> bool:
        roots = self.write_roots if write else self.read_roots
        return any(is_within(path, root) for root in roots) and not self.denied_by_glob(path)

    def check(self, resolved: str, write: bool = False, asked: str | None = None) -> None:
        """Raise PATH_DENIED unless `resolved` (and the path `asked` for) is allowed."""
        roots = self.write_roots if write else self.read_roots
        kind = "write" if write else "read"
        shown = asked if asked and asked != resolved else resolved
        via = f" (resolves to {resolved})" if asked and asked != resolved else ""
        if not any(is_within(resolved, root) for root in roots):
            allowed = ", ".join(roots) or "nothing"
            msg = f"{shown}{via}: outside the paths this session may {kind} ({allowed})"
            raise PathDenied(msg)
        for path in (resolved, asked):
            glob = self.denied_by_glob(path) if path else None
            if glob is not None:
                msg = f"{shown}{via}: denied by this session's pattern {glob!r}"
                raise PathDenied(msg)


def _clean_roots(kind: str, roots: Sequence[str], ceiling: Sequence[str]) -> tuple[str, ...]:
    if len(roots) > MAX_ROOTS:
        msg = f"allowlist.{kind}: at most {MAX_ROOTS} roots, got {len(roots)}"
        raise BadRequest(msg)
    cleaned = []
    for root in roots:
        if not root.startswith("/") or "\x00" in root:
            msg = f"allowlist.{kind}: {root!r} is not an absolute path"
            raise BadRequest(msg)
        norm = normalize(root)
        if not any(is_within(norm, top) for top in ceiling):
            msg = (
                f"allowlist.{kind}: {root!r} is outside the roots this daemon allows "
                f"({', '.join(ceiling)})"
            )
            raise BadRequest(msg)
        cleaned.append(norm)
    return tuple(dict.fromkeys(cleaned))


def session_policy(requested: Allowlist | None, ceiling: Sequence[str]) -> PathPolicy:
    """The policy of a new session: its request, checked against the daemon's ceiling.

    No roots at all in the request means the default (read and write
    /workspace); deny globs apply either way.
    """
    ceiling = [normalize(top) for top in ceiling]
    read: Sequence[str] = requested.read_roots if requested else ()
    write: Sequence[str] = requested.write_roots if requested else ()
    globs = list(requested.deny_globs) if requested else []
    if not read and not write:
        read = write = [r for r in DEFAULT_ROOTS if any(is_within(r, t) for t in ceiling)]
    if len(globs) > MAX_GLOBS:
        msg = f"allowlist.deny_globs: at most {MAX_GLOBS} patterns, got {len(globs)}"
        raise BadRequest(msg)
    for glob in globs:
        if not glob or "\x00" in glob or len(glob) > 1024:
            msg = f"allowlist.deny_globs: {glob[:60]!r} is not a usable pattern"
            raise BadRequest(msg)
    return PathPolicy(
        _clean_roots("read_roots", read, ceiling),
        _clean_roots("write_roots", write, ceiling),
        tuple(dict.fromkeys(globs)),
    )
