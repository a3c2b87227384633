"""Bearer tokens: the tokens file (hashes only), its edits, and a store that re-reads it.

A token is `trt_<id>_<secret>`: 12 hex digits naming its record, then 43
characters of base64url (256 random bits). The file keeps one JSON object a
line — `id`, `tenant`, `created`, `admin`, `sha256` (of the whole token) —
and never a token. The daemon notices a change of the file (mtime, size,
inode) within `CHECK_INTERVAL_S` and uses the new contents from then on, so
a revocation or an edit by hand needs no restart.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from runtime.config import tenant_name_problem

log = logging.getLogger(__name__)

PREFIX = "trt_"
TOKEN = re.compile(r"trt_([0-9a-f]{12})_[A-Za-z0-9_-]{43}")
TOKEN_LENGTH = 60
# A change to the file is seen within this (DESIGN: 5 s).
CHECK_INTERVAL_S = 1.0
HEADER = "# toolrt tokens: one JSON object a line, hashes only; edit with `toolrt tokens`.\n"


def token_digest(token: str) -> str:
    """Hex SHA-256 of a token: tokens carry 256 random bits, so no slow hash is needed."""
    return hashlib.sha256(token.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class TokenRecord:
    """One line of the tokens file."""

    id: str
    tenant: str
    created: str
    sha256: str
    admin: bool = False

    def line(self) -> str:
        """`tokens list`: id first, then tenant, creation time and the admin flag."""
        return "\t".join([self.id, self.tenant, self.created] + (["admin"] if self.admin else []))


def parse_records(text: str, where: str) -> list[TokenRecord]:
    """The records of a tokens file; a malformed line is logged and left out."""
    records = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            data = json.loads(line)
            record = TokenRecord(
                id=str(data["id"]),
                tenant=str(data["tenant"]),
                created=str(data.get("created", "")),
                sha256=str(data["sha256"]),
                admin=data.get("admin", False) is True,
            )
        except (ValueError, KeyError, TypeError) as exc:
            log.error("%s line %d: not a token record (%s); ignored", where, number, exc)
            continue
        problem = tenant_name_problem(record.tenant)
        if problem or not re.fullmatch(r"[0-9a-f]{12}", record.id):
            log.error("%s line %d: %s; ignored", where, number, problem or "bad id")
            continue
        records.append(record)
    return records


def read_records(path: str | Path) -> list[TokenRecord]:
    """Every record of the file at `path` (none when it does not exist)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return parse_records(text, str(path))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One edit of the tokens file at a time (a sidecar lock: the file itself is replaced)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write(path: Path, records: list[TokenRecord]) -> None:
    """Replace the file atomically: the daemon reads either version, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(HEADER)
        for record in records:
            f.write(json.dumps(asdict(record), sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def create_token(path: str | Path, tenant: str, admin: bool = False) -> tuple[TokenRecord, str]:
    """A new token for `tenant`: its record (stored) and the token (returned once)."""
    problem = tenant_name_problem(tenant)
    if problem:
        raise ValueError(problem)
    path = Path(path)
    with _locked(path):
        records = read_records(path)
        taken = {r.id for r in records}
        token_id = secrets.token_hex(6)
        while token_id in taken:
            token_id = secrets.token_hex(6)
        token = f"{PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        record = TokenRecord(token_id, tenant, created, token_digest(token), admin)
        _write(path, [*records, record])
    return record, token


def revoke_token(path: str | Path, token_id: str) -> bool:
    """Remove the token `token_id`; False when there is none."""
    path = Path(path)
    with _locked(path):
        records = read_records(path)
        kept = [r for r in records if r.id != token_id]
        if len(kept) == len(records):
            return False
        _write(path, kept)
    return True


class TokenStore:
    """The tokens of a file, re-read when it changes (checked at most every second)."""

    def __init__(
        self,
        path: str | Path,
        check_interval_s: float = CHECK_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._path = Path(path)
        self._interval = check_interval_s
        self._clock = clock
        self._checked = -float("inf")
        self._stamp: tuple[int, int, int] | None = None
        self._by_id: dict[str, TokenRecord] = {}
        self._loaded = False
        # Counts the file's loads: what was looked up before a change is stale.
        self.generation = 0
        self._refresh()

    def __len__(self) -> int:
        return len(self._by_id)

    def _refresh(self) -> None:
        now = self._clock()
        if now - self._checked < self._interval:
            return
        self._checked = now
        try:
            st = self._path.stat()
            stamp: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            stamp = None
        if self._loaded and stamp == self._stamp:
            return
        self._loaded = True
        self._stamp = stamp
        try:
            records = read_records(self._path)
        except OSError as exc:
            # Fail closed: a file that cannot be read admits nobody.
            log.error("tokens file %s cannot be read (%s): no token is valid", self._path, exc)
            records = []
        if stamp is None:
            log.warning("tokens file %s is missing or unreadable: no token is valid", self._path)
        self._by_id = {r.id: r for r in records}
        self.generation += 1
        log.info("tokens file %s: %d token(s)", self._path, len(self._by_id))

    def current(self) -> int:
        """The generation of the tokens in force, the file checked first (at
        most every interval): a cache of lookups keyed on it honours revocation."""
        self._refresh()
        return self.generation

    def lookup(self, token: str) -> TokenRecord | None:
        """The record of a well-formed `token`, or None; hashes compared in constant time."""
        self._refresh()
        match = TOKEN.fullmatch(token)
        record = self._by_id.get(match.group(1)) if match else None
        digest = token_digest(token) if match else ""
        # Compare even without a record, so the time taken says nothing about the id.
        expected = record.sha256 if record else "0" * 64
        return record if hmac.compare_digest(digest.encode(), expected.encode()) else None
