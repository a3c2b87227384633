"""Network egress end to end: real sandboxes, the real relay and proxy, real
clients (pip, curl, Python) — and upstreams on 127.0.0.1 only, mapped to
test names with `[network.hosts]`. Nothing leaves this machine."""

from __future__ import annotations

import ast
import os
import socket
import time
from collections.abc import Iterator

import grpc
import pytest

from runtime.client import Client, ToolrtRpcError
from runtime.sandbox.relay_dirs import relay_dir, socket_path
from tests.egress_upstreams import TOYPKG_VALUE, Upstreams, upstreams
from tests.helpers import containers_of, free_port, under_gvisor, wait_for

pytestmark = pytest.mark.docker

PINNED = {name: "127.0.0.1" for name in ("web.test", "pypi.test", "secure.test", "other.test")}
CA = "/workspace/ca.pem"
DENIED = "toolrt: {} is not in this session's network allowlist"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstreams]:
    with upstreams(tmp_path_factory.mktemp("upstreams")) as running:
        yield running


def recipe_image() -> str:
    """This checkout's image (pip, curl...) by its recipe tag: `:default` is
    retagged by whichever checkout ran `make image` last on this engine."""
    from runtime.images import build

    return f"{build.REPOSITORY}:{build.recipe_hash('bookworm')}"


@pytest.fixture(scope="module")
def image(docker_client) -> str:
    name = recipe_image()
    try:
        docker_client.images.get(name)
    except Exception:  # noqa: BLE001
        pytest.fail(f"{name} (this checkout's sandbox image) is missing: run `make image`")
    return name


def allow_max(servers: Upstreams) -> list[str]:
    """The test names on 80, 443 and the servers' ports: never every port of a
    name pinned to loopback, which the daemon refuses to start with."""
    return ["*.test", f"*.test:{servers.http_port}", f"*.test:{servers.tls_port}", "localhost:*"]


@pytest.fixture
def egress(make_daemon, image, servers):
    return make_daemon(image=image, network={"allow_max": allow_max(servers), "hosts": PINNED})


@pytest.fixture
def client(egress) -> Iterator[Client]:
    with Client(egress.target) as c:
        yield c


def open_session(client: Client, servers: Upstreams, *allow: str, **network):
    """A session allowed `allow` (default: the test names on the servers' ports)."""
    allow = allow or (
        f"web.test:{servers.http_port}",
        f"pypi.test:{servers.http_port}",
        f"secure.test:{servers.tls_port}",
        f"other.test:{servers.tls_port}",
    )
    session = client.session(network={"allow": list(allow), **network})
    written = session.call("write_file", {"path": CA, "content": servers.ca_pem})
    assert written.ok
    return session


def shell(session, command: str, **arguments):
    result = session.shell(command, **arguments)
    assert result.ok, result
    return result.output


def test_pip_install_from_the_test_index(client, servers):
    with open_session(client, servers) as session:
        index = f"http://pypi.test:{servers.http_port}/simple"
        out = shell(
            session,
            f"pip install --index-url {index} --trusted-host pypi.test toypkg "
            "&& python3 -c 'import toypkg; print(toypkg.VALUE)'",
            timeout_s=120,
        )
        assert out["exit_code"] == 0, out
        assert out["stdout"].strip().endswith(TOYPKG_VALUE)
        assert "externally-managed" not in out["stderr"]
        assert "network_denied" not in out


def test_plain_pip_install_name_with_a_configured_https_index(client, servers):
    # What an operator's mirror looks like to the model: a plain `pip install
    # NAME`, over CONNECT and TLS, into the user's site under /workspace.
    env = {"PIP_INDEX_URL": f"https://pypi.test:{servers.tls_port}/simple", "PIP_CERT": CA}
    allow = [f"pypi.test:{servers.tls_port}"]
    with client.session(network={"allow": allow}, env=env) as session:
        session.call("write_file", {"path": CA, "content": servers.ca_pem})
        out = shell(session, "pip install toypkg", timeout_s=120)
        assert out["exit_code"] == 0, out
        site = shell(session, "python3 -c 'import toypkg; print(toypkg.__file__)'")
        assert site["stdout"].startswith("/workspace/.local/lib/python3")


def test_curl_and_urllib_through_connect_and_plain_http(client, servers):
    with open_session(client, servers) as session:
        out = shell(session, f"curl -sS --cacert {CA} https://secure.test:{servers.tls_port}/")
        assert (out["exit_code"], out["stdout"]) == (0, "hello from secure.test\n")
        code = (
            "import urllib.request;"
            f"print(urllib.request.urlopen('http://web.test:{servers.http_port}/').read())"
        )
        out = shell(session, f'python3 -c "{code}"')
        assert out["stdout"] == "b'hello from web.test\\n'\n"
        assert "network_denied" not in out


def test_a_host_off_the_list_gets_403_and_is_listed(client, servers):
    with open_session(client, servers) as session:
        out = shell(session, f"curl -sS -w ' %{{http_code}}' http://evil.test:{servers.http_port}/")
        assert out["stdout"] == DENIED.format("evil.test") + "\n 403"
        assert out["network_denied"] == ["evil.test"]
        # HTTPS: the CONNECT is refused; curl hides the body, the result does not.
        out = shell(session, f"curl -sS https://evil.test:{servers.tls_port}/")
        assert out["exit_code"] != 0
        assert out["network_denied"] == ["evil.test"]
        # An allowed name on a port it is not allowed.
        out = shell(session, f"curl -sS http://web.test:{servers.tls_port}/")
        assert out["stdout"] == DENIED.format(f"web.test:{servers.tls_port}") + "\n"
        # Pip says which host and why, in its own error (of a package the
        # image lacks: six is there, as a dependency of matplotlib).
        pip = shell(
            session, "pip install --retries 1 --index-url https://pypi.org/simple sampleproject"
        )
        assert "toolrt: pypi.org is not in this session's network allowlist" in pip["stderr"], pip[
            "stderr"
        ]
        assert pip["network_denied"] == ["pypi.org"]
        assert "network_denied" not in shell(session, "true")


def test_addresses_and_names_of_loopback_are_refused(client, servers):
    port = servers.http_port
    with open_session(client, servers, f"web.test:{port}", "localhost:*") as session:
        # Straight, they reach the sandbox's own loopback, where nothing listens.
        direct = shell(session, f"curl -sS http://127.0.0.1:{port}/")
        assert "Failed to connect" in direct["stderr"]
        for url, host in [
            (f"http://127.0.0.1:{port}/", "127.0.0.1"),
            (f"http://[::1]:{port}/", "[::1]"),
            (f"http://[::ffff:127.0.0.1]:{port}/", "[::ffff:127.0.0.1]"),
            (f"http://2130706433:{port}/", "127.0.0.1"),
            (f"http://0x7f.1:{port}/", "127.0.0.1"),
        ]:
            out = shell(session, f"NO_PROXY= no_proxy= curl -sS -g -w ' %{{http_code}}' {url}")
            assert out["stdout"].endswith(" 403"), (url, out)
            assert out["network_denied"] == [host], url
        # Allowed, but unpinned and resolving to loopback: the rebinding defence.
        out = shell(session, f"NO_PROXY= no_proxy= curl -sS -w ' %{{http_code}}' localhost:{port}/")
        assert "resolves to" in out["stdout"] and "loopback" in out["stdout"]
        assert out["stdout"].endswith(" 403")
        assert out["network_denied"] == ["localhost"]
        # A raw CONNECT to an address, bypassing curl's URL parser.
        raw = (
            "import socket; s = socket.create_connection(('127.0.0.1', 3128));"
            f"s.sendall(b'CONNECT 017700000001:{port} HTTP/1.1\\r\\n\\r\\n');"
            "print(s.recv(200).split(b'\\r\\n')[0].decode())"
        )
        out = shell(session, f'python3 -c "{raw}"')
        assert out["stdout"].startswith("HTTP/1.1 403 toolrt: 017700000001")


RAW_SOCKETS = """
import errno, os, socket
print("interfaces", sorted(os.listdir("/sys/class/net")))
for host, port in [("1.1.1.1", 80), ("172.17.0.1", 2375), ("10.0.0.1", 80),
                   ("192.168.1.1", 80), ("2606:4700::1111", 443)]:
    try:
        socket.create_connection((host, port), timeout=3).close()
        print(host, "connected")
    except OSError as exc:
        print(host, errno.errorcode.get(exc.errno, exc.errno))
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=3).close()
    print("loopback connected")
except OSError as exc:
    print("loopback", errno.errorcode.get(exc.errno, exc.errno))
"""


@pytest.mark.parametrize("with_policy", [True, False])
def test_raw_sockets_have_no_route_out(client, servers, with_policy):
    script = RAW_SOCKETS.replace("PORT", str(servers.http_port))
    network = {"allow": [f"web.test:{servers.http_port}"]} if with_policy else {}
    with client.session(network=network) as session:
        session.call("write_file", {"path": "/workspace/raw.py", "content": script})
        out = shell(session, "python3 /workspace/raw.py")
        lines = out["stdout"].splitlines()
        assert lines[0] == "interfaces ['lo']"
        # gVisor's network stack says "no route to host" where Linux says
        # "network unreachable", IPv6 included.
        unreachable = "EHOSTUNREACH" if under_gvisor() else "ENETUNREACH"
        for line in lines[1:5]:
            assert line.split()[1] == unreachable, line
        # No IPv6 address but ::1 to send from.
        assert lines[5].split()[1] in (unreachable, "EADDRNOTAVAIL"), lines[5]
        # 127.0.0.1 is the sandbox's own loopback, never the host's.
        assert lines[6] == "loopback ECONNREFUSED"
        proxy_vars = shell(session, "env | grep -ci proxy || true")["stdout"].strip()
        assert proxy_vars == ("6" if with_policy else "0")
        relay = shell(session, "curl -sS http://127.0.0.1:3128/ -o /dev/null; echo $?")
        assert relay["stdout"].strip() != "7" if with_policy else relay["stdout"] == "7\n"


SNI = """
import socket, ssl, sys
connect_host, server_name = sys.argv[1], sys.argv[2]
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(f"CONNECT {connect_host}:PORT HTTP/1.1\\r\\n\\r\\n".encode())
print(s.recv(100).split(b"\\r\\n")[0].decode())
context = ssl.create_default_context(cafile="CA")
try:
    tls = context.wrap_socket(s, server_hostname=server_name)
    tls.sendall(f"GET / HTTP/1.0\\r\\nHost: {server_name}\\r\\n\\r\\n".encode())
    print(tls.makefile("rb").read().split(b"\\r\\n\\r\\n")[1].decode().strip())
except (OSError, ssl.SSLError) as exc:
    print("refused", type(exc).__name__)
"""


def test_a_tls_server_name_other_than_the_connect_host_is_refused(client, servers):
    script = SNI.replace("PORT", str(servers.tls_port)).replace("CA", CA)
    with open_session(client, servers) as session:
        session.call("write_file", {"path": "/workspace/sni.py", "content": script})
        same = shell(session, "python3 /workspace/sni.py other.test other.test")
        assert same["stdout"].splitlines() == [
            "HTTP/1.1 200 Connection established",
            "hello from other.test",
        ]
        fronted = shell(session, "python3 /workspace/sni.py other.test secure.test")
        assert fronted["stdout"].splitlines()[1].startswith("refused")
        assert fronted["network_denied"] == ["secure.test"]


def test_the_byte_cap_cuts_a_large_download_and_says_so(client, servers):
    cap = 1 << 20
    with open_session(client, servers, max_bytes=cap) as session:
        assert session.info.network.max_bytes == cap
        big = f"http://web.test:{servers.http_port}/big?bytes={8 << 20}"
        out = shell(session, f"curl -sS -o /workspace/big {big}; find /workspace/big -printf %s")
        size = int(out["stdout"].split()[-1])
        assert size < cap
        assert "network.max_bytes" in out["network_note"]
        after = shell(session, f"curl -sS http://web.test:{servers.http_port}/")
        assert "network.max_bytes" in after["stdout"]


FLOOD = """
import asyncio, collections
async def one(counts):
    try:
        r, w = await asyncio.open_connection("127.0.0.1", 3128)
        w.write(b"GET http://web.test:PORT/hold?s=6 HTTP/1.1\\r\\nHost: web.test:PORT\\r\\n\\r\\n")
        await w.drain()
        line = await r.readline()
        counts[line.split()[1].decode() if line else "closed"] += 1
        w.close()
    except OSError as exc:
        counts[type(exc).__name__] += 1
async def main():
    counts = collections.Counter()
    tasks = [asyncio.ensure_future(one(counts)) for _ in range(200)]
    await asyncio.sleep(1)
    print("opened", flush=True)
    await asyncio.gather(*tasks)
    print("done", dict(counts), flush=True)
asyncio.run(main())
"""


def test_200_connections_of_one_session_do_not_starve_another(client, servers):
    port = servers.http_port
    with open_session(client, servers) as greedy, open_session(client, servers) as other:
        greedy.call(
            "write_file",
            {"path": "/workspace/flood.py", "content": FLOOD.replace("PORT", str(port))},
        )
        started = greedy.shell("python3 /workspace/flood.py", background=True)
        process = started.output["process_id"]
        ready = greedy.call(
            "process_output", {"process_id": process, "wait_for": "opened", "timeout_s": 30}
        )
        assert "opened" in ready.output["output"]
        begun = time.monotonic()
        out = shell(other, f"curl -sS http://web.test:{port}/")
        assert out["stdout"] == "hello from web.test\n"
        assert time.monotonic() - begun < 10  # not held until the flood ends
        done = greedy.call(
            "process_output", {"process_id": process, "wait_for": "done", "timeout_s": 60}
        )
        counts = ast.literal_eval(done.output["output"].splitlines()[-1].removeprefix("done "))
        # The cap's 64 were served; every other connection was refused. A
        # refused connection is closed at once (a flood must hold no
        # descriptors), so its 429 may be cut by the close: "closed" or a
        # reset counts as refused too.
        assert counts.pop("200") == 64, counts
        assert sum(counts.values()) == 136, counts
        assert set(counts) <= {"429", "closed", "ConnectionResetError"}, counts


def test_closing_the_session_closes_its_proxy_and_socket(client, servers, egress):
    config = egress.daemon.config
    session = open_session(client, servers)
    path = socket_path(config, session.id)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(relay_dir(config, session.id)).st_mode & 0o777 == 0o700
    assert egress.daemon.core.egress.proxy(session.id) is not None
    # The sandbox user cannot reach the socket; only the relay (root) can.
    out = shell(session, "(cd /opt/toolrt/egress) 2>&1; echo $?")
    assert "Permission denied" in out["stdout"]
    session.close()
    assert not os.path.exists(relay_dir(config, session.id))
    assert egress.daemon.core.egress.proxy(session.id) is None
    with pytest.raises(FileNotFoundError), socket.socket(socket.AF_UNIX) as probe:
        probe.connect(path)


def test_create_session_checks_patterns_and_echoes_the_policy(client, servers):
    with pytest.raises(ToolrtRpcError) as denied:
        client.create_session(network={"allow": ["pypi.org"]})
    assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert "'pypi.org'" in denied.value.details
    with pytest.raises(ToolrtRpcError) as malformed:
        client.create_session(network={"allow": ["https://pypi.test/simple"]})
    assert malformed.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with client.session(network={"allow": ["Web.Test.", "*.test:443"]}) as session:
        assert list(session.info.network.allow) == ["web.test", "*.test:443"]
        assert session.info.network.max_connections == 64
        tools = {t["name"]: t for t in client.list_tools(session_id=session.id)}
        assert "reaches only these hosts: web.test, *.test:443" in tools["shell"]["description"]
        assert "NO network" not in tools["shell"]["description"]
    with client.session() as offline:
        assert list(offline.info.network.allow) == []
        tools = {t["name"]: t for t in client.list_tools(session_id=offline.id)}
        assert "NO network" in tools["shell"]["description"]


def test_a_warm_container_is_given_network_when_claimed(make_daemon, image, servers, docker_client):
    # Every container of a daemon with egress has its relay directory from
    # creation; a claimed warm one gets its proxy and relay then.
    running = make_daemon(
        image=image, pool_size=1, network={"allow_max": allow_max(servers), "hosts": PINNED}
    )
    pool = running.daemon.core.manager.pool
    wait_for(lambda: pool.ready() == 1)
    [warm] = containers_of(docker_client, running.instance)
    assert os.path.isdir(relay_dir(running.daemon.config, warm.labels["toolrt.session"]))
    with Client(running.target) as client:
        allow = [f"web.test:{servers.http_port}"]
        with client.session(network={"allow": allow}) as session:
            assert session.id == warm.labels["toolrt.session"]
            out = shell(session, f"curl -sS http://web.test:{servers.http_port}/")
            assert out["stdout"] == "hello from web.test\n"


def test_no_pin_leads_a_session_to_the_daemons_own_port(make_daemon, image):
    # With no authentication a loopback peer is an admin: the gRPC port
    # must be out of reach, whatever [network.hosts] says.
    port = free_port()
    running = make_daemon(
        image=image,
        listen=f"127.0.0.1:{port}",
        network={"allow_max": [f"mirror.test:{port}"], "hosts": {"mirror.test": "127.0.0.1"}},
    )
    with Client(running.target) as client:
        with client.session(network={"allow": [f"mirror.test:{port}"]}) as session:
            out = shell(session, f"curl -sS http://mirror.test:{port}/")
            assert "toolrt's own port on this host" in out["stdout"], out
            assert out["network_denied"] == [f"mirror.test:{port}"], out
