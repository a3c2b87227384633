"""The pure path-allowlist logic (runtime/policy/allowlist.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from runtime.errors import BadRequest, PathDenied
from runtime.policy.allowlist import PathPolicy, is_within, normalize, session_policy

CEILING = ["/workspace", "/tmp"]


def request(read=(), write=(), deny=()):
    return SimpleNamespace(read_roots=list(read), write_roots=list(write), deny_globs=list(deny))


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        ("src/app.py", "/workspace/src/app.py"),
        ("/workspace/../etc/passwd", "/etc/passwd"),
        ("../../../../etc", "/etc"),
        ("//workspace//a/./b/", "/workspace/a/b"),
        ("/", "/"),
    ],
)
def test_normalize_is_absolute_and_lexical(asked, expected):
    assert normalize(asked) == expected


@pytest.mark.parametrize(
    ("path", "root", "inside"),
    [
        ("/workspace", "/workspace", True),
        ("/workspace/a/b", "/workspace", True),
        ("/workspace-evil", "/workspace", False),
        ("/workspace-evil/x", "/workspace", False),
        ("/workspacex", "/workspace", False),
        ("/work", "/workspace", False),
        ("/etc/passwd", "/", True),
    ],
)
def test_containment_is_component_wise(path, root, inside):
    assert is_within(path, root) is inside


def test_default_policy_reads_and_writes_only_the_workspace():
    policy = PathPolicy()
    policy.check("/workspace/a.txt")
    policy.check("/workspace/a.txt", write=True)
    for outside in ("/etc/passwd", "/workspace-evil/a", "/tmp/x", "/"):
        with pytest.raises(PathDenied, match="outside the paths this session may"):
            policy.check(outside)


def test_check_names_the_asked_path_and_its_resolution():
    with pytest.raises(PathDenied) as info:
        PathPolicy().check("/etc/passwd", asked="/workspace/link")
    assert "/workspace/link (resolves to /etc/passwd)" in info.value.message


def test_write_roots_apart_from_read_roots():
    policy = session_policy(request(read=["/workspace", "/tmp"], write=["/tmp/out"]), CEILING)
    policy.check("/workspace/src/a.py")
    policy.check("/tmp/out/x", write=True)
    with pytest.raises(PathDenied, match="may write"):
        policy.check("/workspace/src/a.py", write=True)


def test_deny_globs_match_the_path_or_an_ancestor():
    policy = session_policy(request(deny=["*.pem", "/workspace/.git"]), CEILING)
    assert policy.read_roots == ("/workspace",)  # deny only: default roots kept
    with pytest.raises(PathDenied, match=r"pattern '\*\.pem'"):
        policy.check("/workspace/keys/server.pem")
    with pytest.raises(PathDenied, match="/workspace/.git"):
        policy.check("/workspace/.git/config", write=True)
    policy.check("/workspace/.github/ci.yml")
    # The name asked for counts too, not only what it resolves to.
    with pytest.raises(PathDenied):
        policy.check("/workspace/plain.txt", asked="/workspace/link.pem")
    assert policy.denied_by_glob("/workspace/.git/objects/ab") == "/workspace/.git"
    assert not policy.allows("/workspace/a.pem")


@pytest.mark.parametrize(
    ("read", "write", "message"),
    [
        (["/etc"], [], "outside the roots this daemon allows"),
        (["/workspace-evil"], [], "outside the roots this daemon allows"),
        (["/workspace/../etc"], [], "outside the roots this daemon allows"),
        ([], ["/"], "outside the roots this daemon allows"),
        (["workspace"], [], "not an absolute path"),
        (["/workspace\x00"], [], "not an absolute path"),
    ],
)
def test_requests_are_clamped_to_the_ceiling(read, write, message):
    with pytest.raises(BadRequest, match=message):
        session_policy(request(read=read, write=write), CEILING)


def test_requested_roots_are_normalized_and_deduplicated():
    policy = session_policy(
        request(read=["/workspace/src/", "/workspace/src", "/tmp/./x"], write=["/tmp"]), CEILING
    )
    assert policy.read_roots == ("/workspace/src", "/tmp/x")
    assert policy.write_roots == ("/tmp",)


def test_a_read_only_session_writes_nowhere():
    policy = session_policy(request(read=["/workspace"]), CEILING)
    with pytest.raises(PathDenied, match=r"may write \(nothing\)"):
        policy.check("/workspace/a", write=True)


def test_bad_deny_globs_are_refused():
    with pytest.raises(BadRequest, match="deny_globs"):
        session_policy(request(deny=[""]), CEILING)
    with pytest.raises(BadRequest, match="at most"):
        session_policy(request(deny=[f"*.{i}" for i in range(100)]), CEILING)


def test_no_request_is_the_default():
    assert session_policy(None, CEILING) == PathPolicy()


def test_the_ceiling_comes_from_config_and_environment():
    from runtime.config import load_config

    assert load_config(None, environ={}).allowlist_max_roots == ["/workspace", "/tmp"]
    config = load_config(None, environ={"TOOLRT_ALLOWLIST_MAX_ROOTS": "/workspace, /srv"})
    assert config.allowlist_max_roots == ["/workspace", "/srv"]
    policy = session_policy(request(read=["/srv/data"]), config.allowlist_max_roots)
    assert policy.read_roots == ("/srv/data",)
    with pytest.raises(BadRequest):
        session_policy(request(read=["/tmp"]), config.allowlist_max_roots)
