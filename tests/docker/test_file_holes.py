"""Holes in the file tools and transfers, attacked the way a hostile model would."""

from __future__ import annotations

import io
import tarfile

import grpc
import pytest

from runtime.client import ToolrtRpcError
from tests.helpers import make_tar

pytestmark = pytest.mark.docker

DENY = {"read_roots": ["/workspace"], "write_roots": ["/workspace"], "deny_globs": ["*/secret/*"]}


def test_a_hard_link_does_not_carry_a_denied_file_past_the_deny_globs(client):
    with client.session(allowlist=DENY) as session:
        made = session.shell(
            "mkdir -p secret && echo key-material > secret/key.txt && ln secret/key.txt hard"
        )
        assert made.ok and made.output["exit_code"] == 0, made
        assert session.call("read_file", {"path": "/workspace/secret/key.txt"}).error_code == (
            "PATH_DENIED"
        )
        for tool, args in (
            ("read_file", {"path": "/workspace/hard"}),
            ("edit_file", {"path": "/workspace/hard", "old_string": "key", "new_string": "x"}),
        ):
            result = session.call(tool, args)
            assert result.error_code == "PATH_DENIED", (tool, result)
            assert "hard link" in result.error_message
            assert "key-material" not in str(result.output)
        # An ordinary file of the same session reads as before.
        session.call("write_file", {"path": "/workspace/plain.txt", "content": "fine\n"})
        assert session.call("read_file", {"path": "/workspace/plain.txt"}).output["content"] == (
            "fine\n"
        )


def test_without_deny_globs_hard_linked_files_read_as_usual(session):
    assert session.shell("echo shared > a && ln a b").ok
    assert session.call("read_file", {"path": "/workspace/b"}).output["content"] == "shared\n"


@pytest.mark.parametrize(
    "members",
    [
        [("a", "symlink", "pre/out/passwd")],
        # The archive's own link leads to the existing one.
        [("s1", "symlink", "pre"), ("a", "symlink", "s1/out/passwd")],
    ],
    ids=["through-an-existing-link", "chain-into-an-existing-link"],
)
def test_extraction_resolves_links_against_the_real_tree(session, members):
    assert session.shell("mkdir -p pre && ln -s /etc pre/out").ok
    with pytest.raises(ToolrtRpcError) as refused:
        session.upload(make_tar(*members))
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "outside" in refused.value.details
    left = session.shell("cd /workspace && ls").output["stdout"].split()
    assert left == ["pre"], left  # all or nothing


RACER = """
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
swaps, end = 0, time.monotonic() + 30
while time.monotonic() < end:
    swaps += libc.renameat2(-100, b"/workspace/a", -100, b"/workspace/b", 2) == 0
    if swaps % 1000 == 1:
        print(swaps, flush=True)
"""


def test_a_download_is_never_served_from_outside_the_tree_during_a_swap_race(session):
    """/workspace/a and the symlink /workspace/b -> /opt/toolrt are swapped
    (RENAME_EXCHANGE) in a loop while /workspace/a/agent is downloaded: each
    download is the real directory or a refusal, never /opt/toolrt/agent."""
    made = session.shell("mkdir -p a/agent && echo inside > a/agent/marker && ln -s /opt/toolrt b")
    assert made.ok, made
    session.call("write_file", {"path": "/workspace/racer.py", "content": RACER})
    racer = session.shell("python3 -u /workspace/racer.py", background=True)
    assert racer.ok and racer.output["state"] == "running", racer
    served, refused = 0, []
    try:
        for _ in range(150):
            try:
                data = session.download(["/workspace/a/agent"])
            except ToolrtRpcError as exc:
                refused.append(exc.code)
                continue
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                names = sorted(tar.getnames())
            assert names == ["agent", "agent/marker"], names
            served += 1
        swapping = session.call("process_output", {"process_id": racer.output["process_id"]})
        assert swapping.output["state"] == "running", swapping
    finally:
        session.call("process_kill", {"process_id": racer.output["process_id"]})
    assert set(refused) <= {grpc.StatusCode.INVALID_ARGUMENT}
    assert served > 0


@pytest.mark.parametrize(
    ("tool", "arguments_json", "field"),
    [
        ("list_files", '{"path": "/workspace/\\udcff"}', "/path"),
        ("shell", '{"command": "true", "cwd": "/etc/\\udcff"}', "/cwd"),
        ("shell", '{"command": "true", "env": {"\\ud800": "x"}}', "/env/\\ud800"),
    ],
)
def test_a_lone_surrogate_in_arguments_is_invalid_arguments_every_time(
    session, tool, arguments_json, field
):
    for _ in range(2):  # the retry answers from the journal, the same way
        result = session.call(tool, arguments_json, call_id="surrogate-1")
        assert result.error_code == "INVALID_ARGUMENTS", result
        assert f"{field}: contains a lone surrogate" in result.error_message
    assert session.shell("echo fine").output["stdout"] == "fine\n"


def test_file_names_that_are_not_utf8_are_listed_with_replacement_characters(session):
    assert session.shell("mkdir d && touch \"d/$(printf 'bad\\xff')\" d/good").ok
    for _ in range(2):
        result = session.call("list_files", {"path": "/workspace/d"})
        assert result.ok, result
        entries = {e["path"]: e for e in result.output["entries"]}
        assert set(entries) == {"/workspace/d/bad\ufffd", "/workspace/d/good"}
        assert entries["/workspace/d/bad\ufffd"]["invalid_utf8_replaced"] is True
        assert "invalid_utf8_replaced" not in entries["/workspace/d/good"]
