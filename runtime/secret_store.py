"""The daemon's secrets: `secrets_file`, read once at start-up.

`NAME=value` lines (blank lines and `#` comments skipped; the value is
everything after the first `=`, as written). The file is refused unless it
is a regular file of mode 0600 owned by the daemon's user, so nobody else
could have read or planted a value. Values never reach a log, the audit log,
a `Session` or an error message; only names do.
"""

from __future__ import annotations

import os
import stat

from runtime.agent.redact import NAME
from runtime.errors import ConfigurationError

# Shorter values would be redacted out of ordinary text everywhere.
MIN_VALUE = 4


def load_secrets(path: str) -> dict[str, str]:
    """NAME → value from `path` ("" → none); ConfigurationError naming the file."""
    if not path:
        return {}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        msg = f"secrets_file {path}: cannot open it ({exc.strerror})"
        raise ConfigurationError(msg) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            msg = f"secrets_file {path}: not a regular file"
            raise ConfigurationError(msg)
        mode = stat.S_IMODE(st.st_mode)
        if mode != 0o600:
            msg = f"secrets_file {path}: mode is {mode:04o}, expected 0600 (chmod 600 {path})"
            raise ConfigurationError(msg)
        if st.st_uid != os.geteuid():
            msg = (
                f"secrets_file {path}: owned by uid {st.st_uid}, expected the daemon's user "
                f"(uid {os.geteuid()})"
            )
            raise ConfigurationError(msg)
        raw = f.read()
    return parse_secrets(raw, path)


def parse_secrets(raw: bytes, path: str) -> dict[str, str]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        msg = f"secrets_file {path}: not UTF-8 text"
        raise ConfigurationError(msg) from None
    secrets: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition("=")
        name = name.strip()
        where = f"secrets_file {path}, line {number}"
        if not sep or not NAME.fullmatch(name):
            msg = f"{where}: expected NAME=value with NAME like [A-Za-z_][A-Za-z0-9_]*"
            raise ConfigurationError(msg)
        if len(value.encode()) < MIN_VALUE or "\x00" in value:
            msg = f"{where}: the value of {name} must be at least {MIN_VALUE} bytes, without NUL"
            raise ConfigurationError(msg)
        if name in secrets:
            msg = f"{where}: {name} is defined twice"
            raise ConfigurationError(msg)
        secrets[name] = value
    return secrets
