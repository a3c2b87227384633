"""Users and root for programs, against the real engine: other users only
as the tenant's table grants them, root without capabilities unless granted
(and then exactly six), and root unable to reach or forge the agent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from runtime.auth.tokens import create_token
from runtime.client import Client, RemotePermissionError, ToolrtRpcError
from tests.helpers import under_gvisor

pytestmark = pytest.mark.docker

# CHOWN, DAC_OVERRIDE, FOWNER, FSETID, SETGID, SETUID.
ROOT_CAPS = 0xDB
ROOT = {"users": ["root", "nobody"]}
CAPABLE = {"users": ["root"], "root_capabilities": True}


def capabilities(session: Any, user: str) -> dict[str, int]:
    """The Cap* masks of /proc/self/status of a program run as `user`."""
    out = session.exec(["grep", "^Cap", "/proc/self/status"], user=user).stdout.decode()
    return {line.split(":")[0]: int(line.split()[1], 16) for line in out.splitlines()}


@pytest.fixture
def granted(make_daemon: Any) -> Any:
    """A client of a daemon whose default tenant may use root (no capabilities) and nobody."""
    daemon = make_daemon(tenants={"default": ROOT})
    with Client(daemon.target) as client:
        yield client


@pytest.fixture
def capable(make_daemon: Any) -> Any:
    """A client of a daemon whose default tenant's root has capabilities."""
    daemon = make_daemon(tenants={"default": CAPABLE})
    with Client(daemon.target) as client:
        yield client


def test_the_default_image_has_python_and_adduser(session):
    version = session.exec(["python", "--version"])
    assert version.exit_code == 0 and version.stdout.startswith(b"Python 3."), version
    usage = session.exec(["adduser", "--help"])
    assert usage.exit_code == 0 and b"adduser" in usage.stdout, usage


def test_granted_users_run_programs_and_files_as_themselves(granted):
    with granted.session(users=["root", "nobody"]) as session:
        assert list(granted.get_session(session.id).users) == ["root", "nobody"]
        assert granted.get_session(session.id).root_filesystem == "read-only"
        assert session.exec(["id", "-u"], user="root").stdout == b"0\n"
        assert session.exec(["id", "-u"], user="0").stdout == b"0\n"
        assert session.exec(["id", "-un"], user="nobody").stdout == b"nobody\n"
        assert session.exec(["id", "-u"]).stdout == b"1000\n"
        # Files as root: what root owns (/etc/shadow) it reads, the sandbox user cannot.
        assert session.read_file_bytes("/etc/shadow", user="root").startswith(b"root:")
        with pytest.raises(RemotePermissionError) as denied:
            session.read_file_bytes("/etc/shadow")
        assert denied.value.reason == "PERMISSION_DENIED"
        # Root without capabilities may not create files in the sandbox user's directory.
        with pytest.raises(RemotePermissionError) as denied:
            session.write_file_bytes("/workspace/by-root", b"x", user="root")
        assert "permission denied for uid 0" in str(denied.value)
        session.write_file_bytes("/tmp/by-root", b"x", user="root")
        assert session.exec(["find", "/tmp/by-root", "-printf", "%U\\n"]).stdout == b"0\n"
        assert session.stat("/root", user="root").type == "directory"
        # The root filesystem stays read-only for root too.
        with pytest.raises(RemotePermissionError):
            session.write_file_bytes("/etc/x", b"x", user="root")


def test_a_user_not_granted_is_refused_with_a_reason(granted, make_daemon):
    with granted.session(users=["nobody"]) as session:
        for user in ("root", "0", "daemon", "x" * 100):
            with pytest.raises(RemotePermissionError) as refused:
                session.exec(["true"], user=user)
            assert refused.value.reason == "USER_NOT_ALLOWED"
            assert "not one of this session's users" in str(refused.value)
            with pytest.raises(RemotePermissionError) as refused:
                session.stat("/", user=user)
            assert refused.value.reason == "USER_NOT_ALLOWED"
        # A session's user the image lacks: refused by the sandbox, with the reason.
    with granted.session() as session:
        with pytest.raises(RemotePermissionError):
            session.exec(["true"], user="nobody")
    # The tenant's grant bounds what a session may ask for.
    with pytest.raises(RemotePermissionError) as denied:
        granted.create_session(users=["daemon"])
    assert "its users: 'root', 'nobody'" in str(denied.value)


def test_a_tenant_without_the_users_key_cannot_ask_for_root(make_daemon, tmp_path):
    tokens = tmp_path / "tokens"
    _, alice = create_token(tokens, "alice")
    _, bob = create_token(tokens, "bob")
    # Bob has a table (quotas), but no `users`; alice is granted root.
    daemon = make_daemon(
        auth={"tokens_file": str(tokens)},
        tenants={"alice": {"users": ["root"]}, "bob": {"max_sessions": 5}},
    )
    with Client(daemon.target, token=alice) as hers, Client(daemon.target, token=bob) as his:
        for asked in (["root"], ["0"]):
            with pytest.raises(RemotePermissionError) as denied:
                his.create_session(users=asked)
            assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED
        with hers.session(users=["root"]) as session:
            # Bob naming alice's session is told it does not exist, as root or not.
            for user in ("root", ""):
                with pytest.raises(ToolrtRpcError) as missing:
                    his.exec(session.id, ["id"], user=user)
                assert missing.value.reason == "SESSION_NOT_FOUND"


def test_no_tenant_tables_grant_no_users(make_daemon):
    daemon = make_daemon()
    with Client(daemon.target) as client:
        with pytest.raises(RemotePermissionError) as denied:
            client.create_session(users=["root"])
        assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED
        with client.session() as session, pytest.raises(RemotePermissionError) as refused:
            session.exec(["true"], user="root")
        assert refused.value.reason == "USER_NOT_ALLOWED"


def test_the_audit_log_names_the_user(make_daemon, tmp_path):
    audit = tmp_path / "audit.jsonl"
    daemon = make_daemon(tenants={"default": ROOT}, audit_log=str(audit))
    with Client(daemon.target) as client, client.session(users=["root"]) as session:
        session.exec(["true"], user="root")
        session.stat("/", user="root")
        session.exec(["true"])
        with pytest.raises(RemotePermissionError):
            session.exec(["true"], user="nobody")
    records = [json.loads(line) for line in Path(audit).read_text().splitlines()]
    users = [(r["event"], r.get("user"), r.get("code") or "OK") for r in records]
    assert ("exec", "root", "OK") in users
    assert ("file.stat", "root", "OK") in users
    assert ("exec", "sandbox", "OK") in users
    assert ("exec", "nobody", "PERMISSION_DENIED") in users


def test_a_user_the_image_lacks_is_refused_by_the_sandbox_and_a_bare_uid_is_its_own_group(
    make_daemon,
):
    daemon = make_daemon(tenants={"default": {"users": ["alice", "4242"]}})
    with Client(daemon.target) as client, client.session(users=["alice", "4242"]) as session:
        for attempt in (
            lambda: session.exec(["true"], user="alice"),
            lambda: session.stat("/", user="alice"),
            lambda: session.read_file_bytes("/etc/hostname", user="alice"),
            lambda: session.write_file_bytes("/tmp/x", b"x", user="alice"),
        ):
            with pytest.raises(RemotePermissionError) as refused:
                attempt()
            assert refused.value.reason == "USER_NOT_ALLOWED"
            assert "user 'alice': no such user in the sandbox's /etc/passwd" in str(refused.value)
        assert session.exec(["id", "-u"], user="4242").stdout == b"4242\n"
        assert session.exec(["id", "-g"], user="4242").stdout == b"4242\n"
        session.write_file_bytes("/tmp/by-4242", b"x", user="4242")
        owner = session.exec(["find", "/tmp/by-4242", "-printf", "%U:%G\\n"])
        assert owner.stdout == b"4242:4242\n"


def test_root_without_capabilities_is_root_in_name_only(granted):
    with granted.session(users=["root"]) as session:
        caps = capabilities(session, "root")
        assert caps["CapEff"] == caps["CapPrm"] == caps["CapInh"] == 0, caps
        session.write_file_bytes("/tmp/by-root", b"x", user="root")
        chown = session.exec(["chown", "1000", "/tmp/by-root"], user="root")
        assert chown.exit_code != 0 and b"Operation not permitted" in chown.stderr
        session.write_file_bytes("/workspace/private", b"secret", mode=0o600)
        for read in (["cat", "/workspace/private"], ["sh", "-c", "echo x >> /workspace/private"]):
            denied = session.exec(read, user="root")
            assert denied.exit_code != 0 and b"Permission denied" in denied.stderr
        with pytest.raises(RemotePermissionError):
            session.read_file_bytes("/workspace/private", user="root")
        with pytest.raises(RemotePermissionError):
            session.write_file_bytes("/workspace/private", b"y", user="root", if_exists="append")
        setuid = session.exec(["python3", "-c", "import os; os.setuid(1000)"], user="root")
        assert setuid.exit_code != 0 and b"PermissionError" in setuid.stderr


def test_root_granted_capabilities_gets_exactly_six(capable):
    with capable.session(users=["root"]) as session:
        caps = capabilities(session, "root")
        assert caps["CapEff"] == caps["CapPrm"] == ROOT_CAPS, caps
        assert caps["CapBnd"] & ~ROOT_CAPS == 1 << 5  # and KILL, the agent's
        assert capabilities(session, "")["CapEff"] == 0
        session.write_file_bytes("/workspace/private", b"secret", mode=0o600)
        assert session.exec(["cat", "/workspace/private"], user="root").stdout == b"secret"
        assert session.read_file_bytes("/workspace/private", user="root") == b"secret"
        session.write_file_bytes("/workspace/private", b"!", user="root", if_exists="append")
        assert session.exec(["chown", "0:0", "/workspace/private"], user="root").exit_code == 0
        assert session.stat("/workspace/private").mode & 0o777 == 0o600
        assert session.exec(["find", "/workspace/private", "-printf", "%U\\n"]).stdout == b"0\n"


def test_a_session_of_a_tenant_granted_capabilities_gives_them_to_root_only_if_asked(capable):
    with capable.session() as session:
        assert capabilities(session, "")["CapBnd"] & ROOT_CAPS != ROOT_CAPS


ATTACKS = """
import ctypes, os, signal, sys
out = []
for name in ("mem", "environ", "maps", "fd/0", "fd/1", "fd/3", "fd/4", "root/etc/hostname"):
    try:
        with open("/proc/1/" + name, "rb") as f:
            f.read(16)
        out.append(name + " READ")
    except OSError as exc:
        out.append(name + " " + type(exc).__name__)
for fd in os.listdir("/proc/1/fd"):
    try:
        out.append("link %s %s" % (fd, os.readlink("/proc/1/fd/" + fd)))
    except OSError as exc:
        out.append("link " + type(exc).__name__)
libc = ctypes.CDLL(None, use_errno=True)
for request in (16, 0x4206):  # PTRACE_ATTACH, PTRACE_SEIZE
    out.append("ptrace %d %d" % (libc.ptrace(request, 1, 0, 0), ctypes.get_errno()))
print("\\n".join(out))
"""


@pytest.mark.runc_only(
    "gVisor lets a process of the agent's uid read its /proc entries (docs/security.md)"
)
@pytest.mark.parametrize("grant", [ROOT, CAPABLE], ids=["root", "capable-root"])
def test_root_cannot_read_or_trace_the_agent(make_daemon, grant):
    daemon = make_daemon(tenants={"default": grant})
    with Client(daemon.target) as client, client.session(users=["root"]) as session:
        out = session.exec(["python3", "-c", ATTACKS], user="root").stdout.decode()
        lines = out.splitlines()
        assert all(line.endswith(("PermissionError", "ptrace -1 1")) for line in lines), out
        assert "link PermissionError" in lines and len(lines) > 10, out


@pytest.mark.parametrize("grant", [ROOT, CAPABLE], ids=["root", "capable-root"])
def test_signals_from_root_leave_the_agent_answering(make_daemon, grant):
    daemon = make_daemon(tenants={"default": grant})
    with Client(daemon.target) as client, client.session(users=["root"]) as session:
        session.shell("mkdir -p kept && cd kept && export KEPT=1", persist_env=True)
        # STOP and KILL cannot be ignored, and gVisor does not shield the
        # container's init from its own processes: there root can stop or
        # end its own session's agent (docs/security.md).
        stop = () if under_gvisor() else ("STOP", "KILL")
        for sig in ("TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "TSTP", "SEGV", "PIPE", *stop):
            sent = session.exec(["kill", f"-{sig}", "1"], user="root")
            assert session.exec(["echo", "alive"]).stdout == b"alive\n", (sig, sent)
        session.exec(["kill", "-CONT", "1"], user="root")
        done = session.shell("pwd; echo $KEPT")
        assert done.output["stdout"] == "/workspace/kept\n1\n", done


def test_a_writable_root_is_refused_where_nothing_bounds_it(make_daemon):
    daemon = make_daemon(tenants={"default": {"writable_root": True}})
    with Client(daemon.target) as client, pytest.raises(ToolrtRpcError) as refused:
        client.create_session(root_filesystem="writable")
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "overlay2 over ext4" in refused.value.details


def test_a_writable_root_under_runsc_overlay_takes_adduser(make_daemon):
    grant = {"users": ["root", "alice"], "root_capabilities": True, "writable_root": True}
    daemon = make_daemon(runtimes=["runsc-overlay"], tenants={"default": grant})
    with Client(daemon.target) as client:
        with client.session(users=["root"], runtime="runsc-overlay") as session:
            # Read-only unless asked for: root with capabilities cannot add a user.
            added = session.exec(
                ["adduser", "--disabled-password", "--gecos", "", "alice"], user="root"
            )
            assert added.exit_code != 0, added
        with client.session(
            users=["root", "alice"], runtime="runsc-overlay", root_filesystem="writable"
        ) as session:
            assert client.get_session(session.id).root_filesystem == "writable"
            added = session.exec(
                ["adduser", "--disabled-password", "--gecos", "", "alice"], user="root"
            )
            assert added.exit_code == 0, added
            assert session.exec(["id", "-un"], user="alice").stdout == b"alice\n"
            session.write_file_bytes("/etc/x", b"written", user="root")
            assert session.exec(["cat", "/etc/x"]).stdout == b"written"
            # The sandbox user still cannot write there.
            with pytest.raises(RemotePermissionError):
                session.write_file_bytes("/etc/y", b"no")


def outcome_of(run: Any) -> str:
    """ "exit N" of a program run, or the reason of the error it raised."""
    try:
        return f"exit {run().exit_code}"
    except ToolrtRpcError as exc:
        return exc.reason


def test_a_writable_root_is_bounded_by_the_sessions_memory(make_daemon):
    grant = {"users": ["root"], "root_capabilities": True, "writable_root": True}
    daemon = make_daemon(runtimes=["runsc-overlay"], tenants={"default": grant})
    limits = {"memory_bytes": 256 << 20, "workspace_bytes": 32 << 20, "tmp_bytes": 32 << 20}
    fields = {"users": ["root"], "runtime": "runsc-overlay", "limits": limits}
    with Client(daemon.target) as client:
        with client.session(root_filesystem="writable", **fields) as session:
            # 400 MB into /etc: the root overlay lives in the sandbox's memory,
            # so the write fails or ends the sandbox, as a memory bomb does
            # under gVisor; the host's disk never holds it.
            outcome = outcome_of(
                lambda: session.exec(
                    ["sh", "-c", "head -c 400000000 /dev/zero > /etc/big"], user="root"
                )
            )
            assert outcome == "SANDBOX_LOST" or outcome.startswith("exit "), outcome
            assert outcome != "exit 0"
        with client.session(**fields) as session:
            assert session.exec(["true"]).exit_code == 0
