"""Root in a sandbox writing into, and reading from, its agent's descriptors.

Under runc root cannot open any of the agent's descriptors. Under gVisor it
can open the container's stdin and stdout (gVisor takes a host pipe's owner
from the host, and root matches it; docs/security.md), which is why the
agent no longer speaks there: it speaks on a socket it dialed
(docker/channel.py), which cannot be opened through /proc. Root writes junk
and well-formed forged frames into whatever it can open, and the session
answers as if nothing was written; every other tenant is served
throughout."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from runtime.auth.tokens import create_token
from runtime.client import Client, ToolrtRpcError
from tests.helpers import under_gvisor

pytestmark = pytest.mark.docker

FORGE = r"""
import os, sys
sys.path.insert(0, "/opt/toolrt")
from agent import protocol as p

junk = [
    os.urandom(4096),
    p.MAGIC + (0xFFFFFFF0).to_bytes(4, "big") * 2,  # lengths over every limit
    p.MAGIC + (5).to_bytes(4, "big") + bytes(4) + b"{nope",  # a header that is not JSON
    p.encode(p.Resync(), 0, 0),
]
for epoch in range(4):
    for rid in range(48):
        junk.append(p.encode(p.ExecResult(call_id=str(rid), exit_code=0), rid, epoch, b"forged"))
        junk.append(p.encode(p.HelloReply(version=99, pid=1), rid, epoch))
        junk.append(p.encode(p.Failure(code="INTERNAL", message="forged"), rid, epoch))
opened, stolen = [], 0
for fd in sorted(os.listdir("/proc/1/fd"), key=int):
    for flags, mode in ((os.O_WRONLY, "w"), (os.O_RDONLY, "r")):
        try:
            f = os.open("/proc/1/fd/" + fd, flags | os.O_NONBLOCK)
        except OSError:
            continue
        opened.append(fd + mode)
        try:
            if mode == "w":
                for frame in junk:
                    os.write(f, frame)
            else:
                stolen += len(os.read(f, 1 << 16))
        except OSError:
            pass
        os.close(f)
print(" ".join(opened) or "none", stolen)
"""


def outcome(run: Any) -> str:
    """ "ok", the error code of a failed result, or the reason (else the
    status) of a refused RPC; "INTERNAL" for an INTERNAL one, whatever it said."""
    try:
        result = run()
    except ToolrtRpcError as exc:
        if exc.code == grpc.StatusCode.INTERNAL:
            return "INTERNAL"
        return exc.reason or exc.code.name
    return getattr(result, "error_code", "") or "ok"


def test_root_writing_into_the_agents_descriptors_harms_nothing(
    make_daemon: Any, docker_client: Any, tmp_path: Any
) -> None:
    tokens = tmp_path / "tokens"
    _, alice = create_token(tokens, "alice")
    _, bob = create_token(tokens, "bob")
    daemon = make_daemon(
        auth={"tokens_file": str(tokens)},
        tenants={"alice": {"users": ["root"]}},
    )
    with Client(daemon.target, token=alice) as hers, Client(daemon.target, token=bob) as his:
        with his.session() as other:
            assert other.shell("echo before").output["stdout"] == "before\n"
            session = hers.session(users=["root"])
            forge = ["python3", "-c", FORGE]
            attack = outcome(lambda: session.exec(forge, user="root", timeout_s=30))
            # Bob's session is served all along, and after.
            assert other.shell("echo after").output["stdout"] == "after\n"
            assert other.exec(["echo", "still"]).stdout == b"still\n"
            later = outcome(lambda: session.shell("echo later", timeout_s=10))
            # Nothing root can open carries the protocol (under runc it
            # opens none of the agent's descriptors at all).
            assert attack == later == "ok", (attack, later)
            assert session.shell("echo again").output["stdout"] == "again\n"
            if not under_gvisor():
                out = session.exec(forge, user="root").stdout
                assert out == b"none 0\n", out
            session.close()
            assert not docker_client.containers.list(
                all=True, filters={"label": f"toolrt.session={session.id}"}
            )
        # A new session of the attacker's tenant starts and answers.
        with hers.session() as fresh:
            assert fresh.shell("echo fresh").output["stdout"] == "fresh\n"
