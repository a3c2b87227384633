"""read_file in one agent trip (fake backend through gRPC): the agent resolves
and reads, and the daemon still checks the resolved path before it shows
the content or why there is none."""

from __future__ import annotations

import pytest

from runtime.agent import protocol
from runtime.client import Client


@pytest.fixture
def running(make_daemon):
    return make_daemon(backend="fake")


def reads_sent(backend) -> list[protocol.Message]:
    return [r for _, r in backend.requests if isinstance(r, protocol.Read | protocol.Resolve)]


def test_read_file_is_one_request_that_resolves(running):
    backend = running.daemon.core.backend
    with Client(running.target) as client, client.session() as session:
        assert session.call("write_file", {"path": "d/a.txt", "content": "1\n2\n"}).ok
        backend.requests.clear()
        result = session.call("read_file", {"path": "/workspace/d/../d/a.txt", "offset": 2})
        assert result.output == {
            "content": "2\n",
            "total_lines": 2,
            "truncated": False,
            "binary": False,
        }
        [request] = reads_sent(backend)
        assert isinstance(request, protocol.Read)
        assert (request.path, request.resolve, request.offset) == ("/workspace/d/a.txt", True, 2)


@pytest.mark.parametrize(
    ("path", "code", "says"),
    [
        # Denied comes first, whatever the read found there.
        ("/etc/missing", "PATH_DENIED", "/etc/missing: outside the paths this session may read"),
        ("/tmp", "PATH_DENIED", "/tmp: outside the paths this session may read"),
        ("missing.txt", "NOT_FOUND", "/workspace/missing.txt: no such file"),
        ("/workspace", "INVALID_ARGUMENTS", "/workspace: is a directory"),
    ],
)
def test_read_file_failures_after_the_allowlist(running, path, code, says):
    with Client(running.target) as client, client.session() as session:
        result = session.call("read_file", {"path": path})
        assert (result.error_code, result.output) == (code, {})
        assert says in result.error_message


def test_a_denied_file_shows_no_content(running):
    allowlist = {"read_roots": ["/workspace"], "write_roots": ["/workspace", "/tmp"]}
    with Client(running.target) as client, client.session(allowlist=allowlist) as session:
        assert session.call("write_file", {"path": "/tmp/s.txt", "content": "SECRET"}).ok
        result = session.call("read_file", {"path": "/tmp/s.txt"})
        assert result.error_code == "PATH_DENIED"
        assert "SECRET" not in result.error_message + str(result.output)
