"""The daemon's listeners: TCP (plaintext or TLS, optionally mutual) and the unix socket.

`check_startup` refuses a configuration that would expose the daemon: a
non-loopback `listen` without authentication, half a TLS setting, mutual TLS
without TLS. The unix socket is created owner-only (umask) and then given
`unix_socket_group` and `unix_socket_mode`, so nobody else can connect in
between.
"""

from __future__ import annotations

import contextlib
import grp
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import grpc

from runtime.auth.credentials import is_loopback, startup_problem
from runtime.config import AuthConfig, Config
from runtime.errors import ConfigurationError

log = logging.getLogger(__name__)


def check_startup(config: Config) -> None:
    problem = startup_problem(config)
    if problem:
        raise ConfigurationError(problem)
    host = config.listen.rpartition(":")[0]
    if config.listen and config.auth.tokens_file and not config.auth.tls_cert_file:
        if not is_loopback(host):
            log.warning(
                "tokens travel in plaintext on %s: set auth.tls_cert_file and auth.tls_key_file",
                config.listen,
            )


def _read(setting: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        msg = f"{setting} = {path!r} cannot be read: {exc.strerror or exc}"
        raise ConfigurationError(msg) from exc


def server_credentials(auth: AuthConfig) -> grpc.ServerCredentials | None:
    """TLS credentials of the TCP listener (None: plaintext).

    grpcio can only require a client certificate or not ask for one, so with
    `tls_client_ca_file` every TCP client must present one the CA signed.
    """
    if not auth.tls_cert_file:
        return None
    pair = (
        _read("auth.tls_key_file", auth.tls_key_file),
        _read("auth.tls_cert_file", auth.tls_cert_file),
    )
    ca = (
        _read("auth.tls_client_ca_file", auth.tls_client_ca_file)
        if auth.tls_client_ca_file
        else None
    )
    return grpc.ssl_server_credentials(
        [pair], root_certificates=ca, require_client_auth=ca is not None
    )


def _gid(group: str) -> int:
    if group.isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        msg = f"unix_socket_group = {group!r}: no such group"
        raise ConfigurationError(msg) from None


@contextlib.contextmanager
def _owner_only() -> Iterator[None]:
    # The umask is process-wide, but held only while gRPC binds the socket.
    previous = os.umask(0o177)
    try:
        yield
    finally:
        os.umask(previous)


def add_listeners(
    server: grpc.aio.Server, config: Config, credentials: grpc.ServerCredentials | None
) -> int:
    """Bind the TCP (with `credentials`: TLS) and unix listeners; the TCP port (0 when none)."""
    port = 0
    if config.listen:
        try:
            if credentials is None:
                port = server.add_insecure_port(config.listen)
            else:
                port = server.add_secure_port(config.listen, credentials)
        except RuntimeError:  # grpcio's word for a failed bind
            port = 0
        if port == 0:
            # Bound without SO_REUSEPORT: a port in use is refused, not shared.
            msg = (
                f"listen = {config.listen!r}: cannot listen there (in use by another "
                "process, or not an address of this host)"
            )
            raise ConfigurationError(msg)
    if config.unix_socket:
        gid = _gid(config.unix_socket_group) if config.unix_socket_group else -1
        with _owner_only():
            server.add_insecure_port(f"unix:{config.unix_socket}")
        os.chown(config.unix_socket, -1, gid)
        os.chmod(config.unix_socket, config.unix_socket_mode)
    return port
