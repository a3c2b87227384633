"""Where each container's relay socket lives on the host.

The backend makes the directory with the container it is mounted into;
the egress service listens in it and sweeps a previous run's.

Every container of a daemon whose `network.allow_max` is set gets a
directory of its own, `<socket root>/<session id>`, mode 0700, bind-mounted
read-only at the sandbox's RELAY_DIR when the container is created: a
directory rather than the socket file, because a bind mount pins the
inode, and a daemon that listens anew (after a restart, or when a warm
container is claimed) must be seen by the sandbox. The daemon's proxy for
the session listens on `proxy.sock` inside it. The sandbox's root (the
agent) owns it as the daemon's root does; the sandbox user cannot enter.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil

from runtime.agent.protocol import RELAY_SOCKET
from runtime.config import Config

SOCKET_NAME = os.path.basename(RELAY_SOCKET)
# sockaddr_un.sun_path holds 108 bytes, its terminating NUL included.
MAX_SOCKET_PATH = 107
# Session ids are 32 hex digits; the check leaves room for any id this long.
SESSION_ID_BYTES = 32
_SAFE_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def egress_enabled(config: Config) -> bool:
    """Do this daemon's sessions ever get network (and its containers a relay directory)?"""
    return bool(config.network.allow_max)


def socket_root(config: Config) -> str:
    """The directory holding this instance's per-container relay directories."""
    if config.network.socket_dir:
        return os.path.abspath(config.network.socket_dir)
    if os.geteuid() == 0:
        return f"/run/toolrt/{config.instance}"
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime_dir:
        return os.path.join(runtime_dir, "toolrt", config.instance)
    return f"/tmp/toolrt-{os.geteuid()}/{config.instance}"


def socket_path_problem(config: Config) -> str:
    """Why this config's socket paths cannot work ("" when they can)."""
    longest = os.path.join(socket_root(config), "x" * SESSION_ID_BYTES, SOCKET_NAME)
    size = len(longest.encode())
    if size <= MAX_SOCKET_PATH:
        return ""
    return (
        f"relay socket paths such as {longest} are {size} bytes, more than the "
        f"{MAX_SOCKET_PATH} a unix socket address holds: set a shorter network.socket_dir "
        "(or a shorter instance name)"
    )


def relay_dir(config: Config, session_id: str) -> str:
    if not _SAFE_ID.match(session_id):
        msg = f"session id {session_id!r} cannot name a relay directory"
        raise ValueError(msg)
    return os.path.join(socket_root(config), session_id)


def socket_path(config: Config, session_id: str) -> str:
    return os.path.join(relay_dir(config, session_id), SOCKET_NAME)


def make_relay_dir(config: Config, session_id: str) -> str:
    """Create (or empty) the session's relay directory, mode 0700; its path."""
    path = relay_dir(config, session_id)
    root = os.path.dirname(path)
    os.makedirs(root, mode=0o700, exist_ok=True)
    os.chmod(root, 0o700)
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)
    os.mkdir(path, 0o700)
    os.chmod(path, 0o700)  # whatever the umask
    return path


def remove_relay_dir(config: Config, session_id: str) -> None:
    with contextlib.suppress(FileNotFoundError, ValueError):
        shutil.rmtree(relay_dir(config, session_id))


def relay_dirs(config: Config) -> list[str]:
    """Session ids that have a relay directory (to sweep a previous run's)."""
    try:
        return sorted(os.listdir(socket_root(config)))
    except FileNotFoundError:
        return []
