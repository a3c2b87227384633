"""File tools, run_tests and the path allowlist end to end through gRPC."""

from __future__ import annotations

import grpc
import pytest

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import ToolrtRpcError

pytestmark = pytest.mark.docker


def sh(session, command: str) -> str:
    result = session.shell(command)
    assert result.ok and result.output["exit_code"] == 0, result
    return str(result.output["stdout"])


def test_catalog_lists_every_tool_with_a_job_ad(client):
    tools = {t["name"]: t for t in client.list_tools()}
    assert set(tools) >= {"shell", "read_file", "write_file", "edit_file", "list_files"}
    assert "run_tests" in tools
    for name in ("read_file", "write_file", "edit_file", "list_files", "run_tests"):
        assert "no network" in tools[name]["description"].lower()
        assert tools[name]["parameters"]["additionalProperties"] is False


def test_write_then_read_as_the_sandbox_user(session):
    result = session.call("write_file", {"path": "pkg/deep/mod.py", "content": "x = 1\n"})
    assert result.ok, result
    assert result.output == {"path": "/workspace/pkg/deep/mod.py", "bytes_written": 6}
    # Created files and parent directories belong to the sandbox user.
    owners = sh(
        session,
        "find /workspace/pkg /workspace/pkg/deep/mod.py -maxdepth 0 -printf '%U:%G %m %p\\n'",
    )
    assert owners.splitlines() == [
        "1000:1000 755 /workspace/pkg",
        "1000:1000 644 /workspace/pkg/deep/mod.py",
    ]
    read = session.call("read_file", {"path": "/workspace/pkg/deep/mod.py"})
    assert read.output == {
        "content": "x = 1\n",
        "total_lines": 1,
        "truncated": False,
        "binary": False,
    }


def test_write_replaces_atomically_and_keeps_the_mode(session):
    sh(session, "printf old > f.sh; chmod 755 f.sh; ln f.sh hardlink")
    assert session.call("write_file", {"path": "f.sh", "content": "new"}).ok
    # A rename, not an in-place write: the old inode (the hard link) is untouched.
    assert (
        sh(session, "cat f.sh; echo; cat hardlink; echo; find f.sh -printf '%m\\n'")
        == "new\nold\n755\n"
    )
    assert sh(session, "(cd /workspace && ls -a) | grep -c toolrt || true") == "0\n"


def test_read_pages_by_lines_and_flags_binary(session):
    sh(session, "seq 1 10 > ten.txt; printf 'a\\0b' > blob.bin; printf 'no newline' > one.txt")
    page = session.call("read_file", {"path": "ten.txt", "offset": 3, "limit": 2})
    assert page.output == {
        "content": "3\n4\n",
        "total_lines": 10,
        "truncated": True,
        "binary": False,
    }
    tail = session.call("read_file", {"path": "ten.txt", "offset": 9, "limit": None})
    assert tail.output["content"] == "9\n10\n" and tail.output["truncated"] is False
    assert session.call("read_file", {"path": "one.txt"}).output["total_lines"] == 1
    binary = session.call("read_file", {"path": "blob.bin"})
    assert binary.ok and binary.output["binary"] is True and binary.output["content"] == ""
    # A 3 MiB line is read in bounded pieces and cut at the output cap (1 MiB).
    sh(
        session,
        "head -c 3145728 /dev/zero | tr '\\0' a > long.txt; echo >> long.txt; echo end >> long.txt",
    )
    long = session.call("read_file", {"path": "long.txt"})
    assert long.output["total_lines"] == 2 and long.output["truncated"] is True
    assert len(long.output["content"]) == 1 << 20
    assert session.call("read_file", {"path": "long.txt", "offset": 2}).output["content"] == "end\n"
    sh(session, "printf '\\xff\\xfe' > latin.txt")
    assert session.call("read_file", {"path": "latin.txt"}).output["binary"] is True


def test_read_errors(session):
    sh(session, "mkdir -p d; echo s > secret; chmod 000 secret; mkfifo pipe")
    # A FIFO with no writer would block a plain open: it must not hang the agent.
    assert session.call("read_file", {"path": "pipe"}).error_code == "INVALID_ARGUMENTS"
    edit = session.call("edit_file", {"path": "pipe", "old_string": "a", "new_string": "b"})
    assert edit.error_code == "INVALID_ARGUMENTS"
    missing = session.call("read_file", {"path": "nope.txt"})
    assert missing.error_code == "NOT_FOUND"
    assert session.call("read_file", {"path": "d"}).error_code == "INVALID_ARGUMENTS"
    # File permissions are the sandbox user's, not the agent's (root).
    assert session.call("read_file", {"path": "secret"}).error_code == "PATH_DENIED"
    bad = session.call("read_file", {"path": "x", "offset": 0})
    assert bad.error_code == "INVALID_ARGUMENTS" and "/offset" in bad.error_message


def test_edit_file_exact_match_count_and_diff(session):
    sh(session, "printf 'def f():\\n    return 1\\n\\ndef g():\\n    return 1\\n' > m.py")
    ambiguous = session.call(
        "edit_file", {"path": "m.py", "old_string": "return 1", "new_string": "return 2"}
    )
    assert ambiguous.error_code == "INVALID_ARGUMENTS" and "2 times" in ambiguous.error_message
    missing = session.call("edit_file", {"path": "m.py", "old_string": "nope", "new_string": "x"})
    assert missing.error_code == "INVALID_ARGUMENTS" and "0 matches" in missing.error_message
    one = session.call(
        "edit_file",
        {"path": "m.py", "old_string": "f():\n    return 1", "new_string": "f():\n    return 3"},
    )
    assert one.ok and one.output["replacements"] == 1
    assert "-    return 1\n+    return 3\n" in one.output["diff"]
    every = session.call(
        "edit_file",
        {"path": "m.py", "old_string": "return", "new_string": "yield", "replace_all": True},
    )
    assert every.output["replacements"] == 2
    assert sh(session, "grep -c yield m.py") == "2\n"
    assert session.call(
        "edit_file", {"path": "gone.py", "old_string": "a", "new_string": "b"}
    ).error_code == ("NOT_FOUND")


def test_list_files_flat_recursive_and_capped(session):
    sh(session, "mkdir -p a/b; echo hi > a/b/c.txt; echo x > top.txt; ln -s /etc link")
    flat = session.call("list_files", {"path": None, "recursive": None})
    assert flat.output == {
        "entries": [
            {"path": "/workspace/a", "type": "dir", "size": 0},
            {"path": "/workspace/link", "type": "symlink", "size": 0},
            {"path": "/workspace/top.txt", "type": "file", "size": 2},
        ],
        "truncated": False,
    }
    deep = session.call("list_files", {"path": "/workspace", "recursive": True})
    paths = [e["path"] for e in deep.output["entries"]]
    assert "/workspace/a/b/c.txt" in paths
    assert not any(p.startswith("/workspace/link/") for p in paths)  # links not followed
    sh(session, "mkdir many; cd many; seq 1 1100 | xargs touch")
    capped = session.call("list_files", {"path": "many"})
    assert capped.output["truncated"] is True and len(capped.output["entries"]) == 1000
    assert session.call("list_files", {"path": "top.txt"}).error_code == "INVALID_ARGUMENTS"


def test_run_tests_counts_and_failures_from_junit(session):
    test_file = (
        "import pytest\n"
        "def test_ok():\n    print('FAILED fake console line')\n\n"
        "class TestX:\n    def test_bad(self):\n        assert 1 == 2\n\n"
        "@pytest.mark.skip(reason='later')\ndef test_skip():\n    pass\n\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('setup boom')\n\n"
        "def test_err(broken):\n    pass\n"
    )
    assert session.call("write_file", {"path": "tests/test_a.py", "content": test_file}).ok
    result = session.call("run_tests", {"path": None, "args": None})
    assert result.ok, result
    out = result.output
    assert (out["passed"], out["failed"], out["errors"], out["skipped"]) == (1, 1, 1, 1)
    assert out["exit_code"] == 1 and out["duration_ms"] > 0
    failures = {f["test_id"]: f["message"] for f in out["failures"]}
    assert failures["tests/test_a.py::TestX::test_bad"] == "assert 1 == 2"
    assert "setup boom" in failures["tests/test_a.py::test_err"]
    only = session.call("run_tests", {"path": "tests/test_a.py", "args": ["-k", "test_ok"]})
    assert (only.output["passed"], only.output["failed"], only.output["exit_code"]) == (1, 0, 0)
    # The report is removed afterwards; nothing is left in /tmp.
    assert sh(session, "(cd /tmp && ls -a) | grep -c junit || true") == "0\n"


def test_run_tests_without_tests_says_why(session):
    result = session.call("run_tests", {"args": ["--definitely-not-an-option"]})
    assert result.ok and result.output["exit_code"] == 4
    assert "unrecognized arguments" in result.output["output"]
    empty = session.call("run_tests", {"path": "/workspace"})
    assert empty.ok and empty.output["exit_code"] == 5 and empty.output["passed"] == 0
    outside = session.call("run_tests", {"path": "/usr/lib/python3"})
    assert outside.error_code == "PATH_DENIED"


# -- the allowlist ---------------------------------------------------------------
@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "../etc/passwd",
        "/workspace/../etc/passwd",
        "/proc/self/root/etc/passwd",
        "/workspace-evil/x",
        "/tmp/x",
    ],
)
def test_paths_outside_the_workspace_are_denied(session, path):
    for tool, args in (
        ("read_file", {"path": path}),
        ("write_file", {"path": path, "content": "pwned"}),
        ("edit_file", {"path": path, "old_string": "root", "new_string": "toor"}),
        ("list_files", {"path": path}),
    ):
        result = session.call(tool, args)
        assert result.error_code == "PATH_DENIED", (tool, result)


def test_symlinks_to_outside_are_resolved_then_denied(session):
    sh(
        session,
        "mkdir -p /tmp/outside; echo SECRET > /tmp/outside/s; "
        "ln -s / root; ln -s /tmp/outside/s file-link; ln -s /tmp/outside dir-link; "
        "mkdir -p /tmp/../workspace-evil 2>/dev/null; true",
    )
    for path in ("root/etc/passwd", "file-link", "dir-link/s", "dir-link/new"):
        assert session.call("read_file", {"path": path}).error_code == "PATH_DENIED", path
        write = session.call("write_file", {"path": path, "content": "pwned"})
        assert write.error_code == "PATH_DENIED", path
    assert session.call("list_files", {"path": "dir-link"}).error_code == "PATH_DENIED"
    # Denied before the read says what is there (a directory, nothing, no permission).
    for path in ("dir-link", "dir-link/missing", "/root/x"):
        assert session.call("read_file", {"path": path}).error_code == "PATH_DENIED", path
    denied = session.call("read_file", {"path": "file-link"}).error_message
    assert denied.startswith("/workspace/file-link (resolves to /tmp/outside/s): outside"), denied
    assert sh(session, "cat /tmp/outside/s; (cd /tmp/outside && ls)") == "SECRET\ns\n"
    # A link that stays inside is fine.
    sh(session, "echo inside > real.txt; ln -s real.txt good-link")
    assert session.call("read_file", {"path": "good-link"}).output["content"] == "inside\n"


def test_write_file_through_links_that_stay_allowed_writes_their_targets(session):
    # write_file sends the path as checked and the agent refuses to write
    # through a link: each of these is then resolved, checked and written.
    sh(
        session,
        "mkdir real-dir; echo old > real.txt; ln -s real.txt good-link; "
        "ln -s real-dir dir-link; ln -s /workspace/via-tmp.txt /tmp/to-workspace",
    )
    for path, target, content in (
        ("good-link", "/workspace/real.txt", "new"),
        ("dir-link/f.txt", "/workspace/real-dir/f.txt", "in"),
        ("/tmp/to-workspace", "/workspace/via-tmp.txt", "tmp"),
    ):
        written = session.call("write_file", {"path": path, "content": content})
        assert written.ok and written.output["path"] == target, (path, written)
    listing = "cat real.txt real-dir/f.txt via-tmp.txt; readlink good-link dir-link"
    assert sh(session, listing) == "newintmpreal.txt\nreal-dir\n"


def test_cwd_is_anywhere_the_sandbox_user_may_enter_and_is_remembered(session):
    # The allowlist governs the file tools, not where a command runs.
    assert session.shell("pwd", cwd="/usr/bin").output["stdout"] == "/usr/bin\n"
    sh(session, "cd /workspace && ln -s /etc etc-link && mkdir sub")
    assert session.shell("pwd -P", cwd="/workspace/etc-link").output["stdout"] == "/etc\n"
    assert session.shell("pwd", cwd="/workspace/sub").output["stdout"] == "/workspace/sub\n"
    assert session.shell("cd /etc/ssl").ok
    assert session.shell("pwd").output["stdout"] == "/etc/ssl\n"
    assert session.call("read_file", {"path": "/etc/hostname"}).error_code == "PATH_DENIED"
    denied = session.shell("pwd", cwd="/root")
    assert denied.error_code == "PATH_DENIED", denied
    missing = session.shell("pwd", cwd="/nonexistent")
    assert missing.error_code == "NOT_FOUND", missing


def test_symlink_swapped_in_a_loop_never_lets_a_write_out(session):
    sh(session, "mkdir -p /tmp/outside /workspace/d")
    # Flip /workspace/d between a real directory and a link to /tmp/outside,
    # and /workspace/f between a file and a link to a file outside.
    flip = (
        "{ n=0; while [ ! -e /tmp/stop ]; do n=$((n+1)); "
        "rm -rf /workspace/d; ln -s /tmp/outside /workspace/d; "
        "rm -f /workspace/d; mkdir /workspace/d; "
        "ln -sfn /tmp/outside/f /workspace/f; rm -f /workspace/f; echo x > /workspace/f; "
        "echo $n > /tmp/flipped; done; echo $n > /tmp/flips; } >/dev/null 2>&1 &"
    )
    sh(session, flip)
    codes = set()
    # Keep writing until the flipper has really raced the writes: on a loaded
    # host it may get little CPU, so the count of writes is not what matters.
    for i in range(600):
        for path in (f"/workspace/d/w{i}.txt", "/workspace/f"):
            result = session.call("write_file", {"path": path, "content": f"pwned {i}"})
            codes.add(result.error_code or "ok")
            read = session.call("read_file", {"path": path})
            assert read.error_code or "SECRET" not in read.output["content"]
        flipped = "n=$(cat /tmp/flipped 2>/dev/null); echo ${n:-0}"
        if i >= 60 and i % 10 == 0 and int(sh(session, flipped)) > 10:
            break
    sh(session, "touch /tmp/stop; while [ ! -s /tmp/flips ]; do sleep 0.05; done")
    assert int(sh(session, "cat /tmp/flips")) > 10  # the race really ran
    assert (
        sh(session, "rm /tmp/flips /tmp/flipped /tmp/stop; (cd /tmp/outside && ls -A) | wc -l")
        == "0\n"
    )
    assert codes <= {"ok", "PATH_DENIED", "NOT_FOUND", "INVALID_ARGUMENTS"}, codes
    assert "ok" in codes


def test_session_allowlist_roots_and_deny_globs(client):
    allowlist = pb.Allowlist(
        read_roots=["/workspace", "/tmp/shared"], write_roots=["/tmp/shared"], deny_globs=["*.key"]
    )
    with client.session(allowlist=allowlist) as session:
        info = client.get_session(session.id)
        assert list(info.allowlist.write_roots) == ["/tmp/shared"]
        assert session.call("write_file", {"path": "/tmp/shared/a", "content": "1"}).ok
        assert session.call("read_file", {"path": "/tmp/shared/a"}).output["content"] == "1"
        denied = session.call("write_file", {"path": "/workspace/a", "content": "1"})
        assert denied.error_code == "PATH_DENIED" and "may write" in denied.error_message
        sh(session, "echo k > /workspace/id.key; echo v > /workspace/ok.txt")
        assert session.call("read_file", {"path": "id.key"}).error_code == "PATH_DENIED"
        listed = session.call("list_files", {}).output["entries"]
        assert [e["path"] for e in listed] == ["/workspace/ok.txt"]
        # /tmp/shared-evil shares a prefix, not a directory.
        prefix = session.call("write_file", {"path": "/tmp/shared-evil/a", "content": "1"})
        assert prefix.error_code == "PATH_DENIED"


@pytest.mark.parametrize("root", ["/etc", "/", "/workspace/../etc", "relative"])
def test_allowlist_roots_beyond_the_ceiling_are_refused(client, root):
    with pytest.raises(ToolrtRpcError) as info:
        client.create_session(allowlist=pb.Allowlist(read_roots=[root]))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert client.list_sessions() == []
