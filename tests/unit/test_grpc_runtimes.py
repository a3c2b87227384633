"""A session's OCI runtime: the config's by default, another one the operator
offers on request, within the tenant's `runtimes`; echoed on Session and part
of the warm pool's profile (fake backend: the engine is not the point here)."""

from __future__ import annotations

import grpc
import pytest

from runtime.client import Client
from runtime.config import load_config
from tests.unit.secured import status_of


def test_a_session_runs_under_the_runtime_it_asks_for_among_those_offered(make_daemon):
    daemon = make_daemon(backend="fake", runtime="runc", runtimes=["runc", "runsc"])
    with Client(daemon.target) as client:
        assert client.create_session().runtime == "runc"
        chosen = client.create_session(runtime="runsc")
        assert chosen.runtime == "runsc"
        assert client.get_session(chosen.id).runtime == "runsc"
        code, details = status_of(lambda: client.create_session(runtime="kata"))
        assert code == grpc.StatusCode.PERMISSION_DENIED
        assert details == (
            "runtime 'kata' is not offered here; the daemon's runtimes: 'runc', 'runsc'"
        )


def test_without_runtimes_only_the_configs_runtime_is_offered(make_daemon):
    daemon = make_daemon(backend="fake")
    with Client(daemon.target) as client:
        assert client.create_session().runtime == ""
        code, _ = status_of(lambda: client.create_session(runtime="runsc"))
        assert code == grpc.StatusCode.PERMISSION_DENIED


def test_the_tenants_runtimes_judge_the_requested_runtime(secure_daemon):
    secured = secure_daemon(
        runtimes=["runsc"], tenants={"alice": {"runtimes": ["runsc"]}, "bob": {}}
    )
    alice, bob = secured.client("alice"), secured.client("bob")
    code, details = status_of(alice.create_session)
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert details == "tenant alice may not use runtime ''; its runtimes: 'runsc'"
    assert alice.create_session(runtime="runsc").runtime == "runsc"
    assert bob.create_session().runtime == ""


def test_warm_containers_serve_only_sessions_of_their_runtime(make_daemon):
    from tests.helpers import wait_for

    daemon = make_daemon(
        backend="fake",
        runtimes=["runsc"],
        pool_size=1,
        pool_profiles=[{"runtime": "runsc"}],
    )
    pool = daemon.daemon.core.manager._pool  # type: ignore[attr-defined]
    wait_for(lambda: pool.ready() == 1)
    (queue,) = pool._ready.values()
    pooled = queue[0].session_id
    with Client(daemon.target) as client:
        cold = client.create_session()
        assert cold.runtime == "" and cold.id != pooled
        warm = client.create_session(runtime="runsc")
        assert (warm.runtime, warm.id) == ("runsc", pooled)


def test_a_pool_profile_must_use_an_offered_runtime():
    with pytest.raises(ValueError, match=r"pool_profiles\[0\].runtime 'runsc' is neither"):
        load_config(None, {"pool_profiles": [{"runtime": "runsc"}]}, environ={})
