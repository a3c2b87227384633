"""What a tenant's permission keys grant a session: granted only by its table."""

from __future__ import annotations

import pytest

from runtime.config import Config
from runtime.errors import BadRequest, NotBoundedHere, PermissionDenied
from runtime.sessions.grants import grant, user_listed


def config(**tenants: dict[str, object]) -> Config:
    return Config(tenants=tenants, runtimes=["runsc", "runsc-overlay"])


def test_no_table_and_no_key_grant_nothing():
    for cfg in (config(), config(default={"max_sessions": 3}), config(bob={"users": ["root"]})):
        with pytest.raises(PermissionDenied, match="its users: none but the sandbox user"):
            grant(cfg, "alice", ["root"], "", "")
        assert grant(cfg, "alice", ["sandbox", "1000", ""], "", "").users == []


def test_users_are_granted_by_name_and_root_alike_as_0():
    cfg = config(default={"users": ["root", "nobody"]})
    assert grant(cfg, "alice", ["0", "nobody", "0"], "", "").users == ["0", "nobody"]
    with pytest.raises(PermissionDenied, match="'daemon'"):
        grant(cfg, "alice", ["daemon"], "", "")
    assert user_listed("root", ["0"]) and user_listed("", []) and not user_listed("1", ["0"])
    for bad in (["x" * 65], ["a\nb"], [str(n) for n in range(40)]):
        with pytest.raises(BadRequest):
            grant(config(default={"users": bad}), "alice", bad, "", "")


def test_root_gets_capabilities_only_when_granted_and_asked_for():
    cfg = config(default={"users": ["root", "nobody"], "root_capabilities": True})
    assert grant(cfg, "a", ["root"], "", "").root_capabilities
    assert not grant(cfg, "a", ["nobody"], "", "").root_capabilities
    plain = config(default={"users": ["root"]})
    assert not grant(plain, "a", ["root"], "", "").root_capabilities


def test_a_writable_root_needs_the_grant_and_a_runtime_bounding_it():
    with pytest.raises(PermissionDenied, match="writable_root"):
        grant(config(), "a", [], "writable", "runsc-overlay")
    cfg = config(default={"writable_root": True})
    for runtime in ("", "runc", "runsc"):
        with pytest.raises(NotBoundedHere, match="overlay2 over ext4"):
            grant(cfg, "a", [], "writable", runtime)
    assert grant(cfg, "a", [], "writable", "runsc-overlay").writable_root
    assert not grant(cfg, "a", [], "read-only", "").writable_root
    with pytest.raises(BadRequest, match="root_filesystem 'rw'"):
        grant(cfg, "a", [], "rw", "")
