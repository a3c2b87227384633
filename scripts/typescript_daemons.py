"""Run a command (the TypeScript SDK's tests) beside real toolrt daemons.

Starts three daemons on 127.0.0.1, each with its own temporary state_dir and
instance name: plaintext without auth (with a secret, and pypi.org allowed),
TLS with bearer tokens, and mutual TLS. Certificates, a token and the secret
are made on the spot. The command gets their
addresses and credentials as TOOLRT_TEST_* variables; afterwards every daemon
is stopped by pid and any sandbox left with its instance label is removed.

    python scripts/typescript_daemons.py -- npm test
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker

from runtime.auth.tokens import create_token
from tests.pki import CA

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """`toolrt serve` on a free loopback port, configured by TOOLRT_* variables."""

    def __init__(self, name: str, directory: Path, config: dict[str, str]) -> None:
        self.instance = f"ts-{name}-{uuid.uuid4().hex[:8]}"
        self.target = f"127.0.0.1:{free_port()}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRT_")}
        env.update(
            TOOLRT_STATE_DIR=str(directory / f"state-{name}"),
            TOOLRT_POOL_SIZE="0",
            TOOLRT_SHUTDOWN="close",
            **config,
        )
        argv = [sys.executable, "-m", "runtime", "serve"]
        argv += ["--listen", self.target, "--instance", self.instance]
        self.log_path = directory / f"{name}.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self) -> None:
        host, port = self.target.rsplit(":", 1)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        sys.stderr.write(self.log_path.read_text())
        msg = f"daemon {self.instance} did not start listening on {self.target}"
        raise RuntimeError(msg)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def remove_sandboxes(instances: list[str]) -> None:
    client = docker.from_env()
    try:
        for instance in instances:
            filters = {"label": f"toolrt.daemon={instance}"}
            for container in client.containers.list(all=True, filters=filters):
                print(f"removing sandbox left behind: {container.name}", file=sys.stderr)
                container.remove(force=True)
    finally:
        client.close()


def main(command: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="toolrt-ts-") as scratch:
        directory = Path(scratch)
        ca = CA(directory)
        server = ca.server()
        client = ca.client("client", tenant_uri="toolrt://tenant/mtls")
        tokens_file = directory / "tokens"
        _, token = create_token(tokens_file, "alice")
        secret = secrets.token_hex(16)
        secrets_file = directory / "secrets.env"
        secrets_file.write_text(f"TS_SECRET={secret}\n")
        secrets_file.chmod(0o600)
        # A session of the plaintext daemon may ask for a secret and a network.
        plain = {"TOOLRT_SECRETS_FILE": str(secrets_file), "TOOLRT_NETWORK__ALLOW_MAX": "pypi.org"}
        tls = {"TOOLRT_AUTH__TLS_CERT_FILE": server.cert_file}
        tls["TOOLRT_AUTH__TLS_KEY_FILE"] = server.key_file
        daemons = {
            "plain": Daemon("plain", directory, plain),
            "tls": Daemon("tls", directory, {**tls, "TOOLRT_AUTH__TOKENS_FILE": str(tokens_file)}),
            "mtls": Daemon(
                "mtls", directory, {**tls, "TOOLRT_AUTH__TLS_CLIENT_CA_FILE": ca.cert_file}
            ),
        }
        try:
            for daemon in daemons.values():
                daemon.wait_ready()
            env = dict(
                os.environ,
                TOOLRT_TEST_TARGET=daemons["plain"].target,
                TOOLRT_TEST_TLS_TARGET=daemons["tls"].target,
                TOOLRT_TEST_MTLS_TARGET=daemons["mtls"].target,
                TOOLRT_TEST_TOKEN=token,
                TOOLRT_TEST_SECRET=secret,
                TOOLRT_TEST_CA_FILE=ca.cert_file,
                TOOLRT_TEST_CLIENT_CERT_FILE=client.cert_file,
                TOOLRT_TEST_CLIENT_KEY_FILE=client.key_file,
            )
            return subprocess.run(command, env=env, check=False).returncode
        finally:
            for daemon in daemons.values():
                daemon.stop()
            remove_sandboxes([d.instance for d in daemons.values()])


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.exit("usage: typescript_daemons.py -- COMMAND [ARG...]")
    sys.exit(main(args))
