"""Per-tenant ceilings: permissions, sums over live sessions, the call rate."""

from __future__ import annotations

import asyncio

import pytest

from runtime.config import Config, Limits
from runtime.errors import AdmissionRefused, PermissionDenied, RateLimited
from runtime.sessions import quotas as quotas_module
from runtime.sessions.quotas import TenantQuotas
from tests.helpers import ManualClock as Clock

GiB = 1 << 30


def quotas(tenants: dict, clock: Clock | None = None) -> TenantQuotas:
    return TenantQuotas(Config(tenants=tenants), clock or Clock())


def test_no_tables_no_ceilings():
    q = quotas({})
    for _ in range(100):
        q.admit("anyone", "any:image", "runsc", Limits(memory_bytes=64 * GiB, cpus=64))
        q.spend_calls("anyone", 1000)
    assert q.usage("anyone").sessions == 100


def test_permissions_are_permission_denied():
    q = quotas({"alice": {"images": ["toolrt-sandbox:*"], "runtimes": [""]}})
    q.admit("alice", "toolrt-sandbox:default", "", Limits())
    with pytest.raises(PermissionDenied, match="may not use image 'python:3'.*toolrt-sandbox:\\*"):
        q.admit("alice", "python:3", "", Limits())
    with pytest.raises(PermissionDenied, match="may not use runtime 'runsc'"):
        q.admit("alice", "toolrt-sandbox:default", "runsc", Limits())
    assert q.usage("alice").sessions == 1  # refusals reserve nothing


def test_secret_names_outside_the_table_are_permission_denied():
    q = quotas({"alice": {"secrets": ["GITHUB_TOKEN"]}, "bob": {}})
    q.check_secrets("alice", ["GITHUB_TOKEN"])
    with pytest.raises(
        PermissionDenied, match="may not use secret\\(s\\) AWS_KEY; its secrets: GITHUB"
    ):
        q.check_secrets("alice", ["GITHUB_TOKEN", "AWS_KEY"])
    q.check_secrets("bob", ["ANY"])  # no secrets key: no ceiling


def test_sums_over_live_sessions_and_release():
    q = quotas({"alice": {"max_sessions": 2, "max_memory_bytes": 3 * GiB, "max_cpus": 3}})
    one = Limits(memory_bytes=GiB, cpus=1)
    q.admit("alice", "i", "", one)
    q.admit("alice", "i", "", one)
    with pytest.raises(AdmissionRefused, match="2 live session.*max_sessions quota is 2"):
        q.admit("alice", "i", "", one)
    q.release("alice", one)
    with pytest.raises(AdmissionRefused, match="max_memory_bytes quota"):
        q.admit("alice", "i", "", Limits(memory_bytes=2 * GiB + 1, cpus=1))
    with pytest.raises(AdmissionRefused, match="asks 2.5; its max_cpus quota is 3"):
        q.admit("alice", "i", "", Limits(memory_bytes=GiB, cpus=2.5))
    q.admit("bob", "i", "", Limits(memory_bytes=100 * GiB))  # other tenants: no table, no limit


def test_default_table_covers_unlisted_tenants_only():
    q = quotas({"default": {"max_sessions": 1}, "alice": {}})
    q.admit("bob", "i", "", Limits())
    q.admit("carol", "i", "", Limits())
    with pytest.raises(AdmissionRefused, match="tenant carol"):
        q.admit("carol", "i", "", Limits())
    q.admit("alice", "i", "", Limits())
    q.admit("alice", "i", "", Limits())


def test_rate_is_a_bucket_per_tenant_with_the_wait_in_the_message():
    clock = Clock()
    q = quotas({"default": {"calls_per_second": 2, "burst": 4}}, clock)
    q.spend_calls("alice", 4)  # the burst
    with pytest.raises(
        RateLimited, match="calls_per_second quota \\(2, burst 4\\); retry in 0.500 s"
    ) as info:
        q.spend_calls("alice", 1)
    assert info.value.retry_after_s == pytest.approx(0.5)
    q.spend_calls("bob", 4)  # a neighbour's flood spends only its own tokens
    clock.now = 0.5
    q.spend_calls("alice", 1)
    with pytest.raises(RateLimited, match="batch of 5 calls exceeds tenant alice's burst of 4"):
        q.spend_calls("alice", 5)
    clock.now = 100
    q.spend_calls("alice", 4)  # refilled, never above the burst
    with pytest.raises(RateLimited):
        q.spend_calls("alice", 1)


def test_burst_defaults_to_the_rate():
    q = quotas({"alice": {"calls_per_second": 0.5}})
    q.spend_calls("alice")
    with pytest.raises(RateLimited, match="burst 1\\); retry in 2.000 s"):
        q.spend_calls("alice")


def test_calls_before_the_time_a_refusal_named_are_held_until_then():
    q = TenantQuotas(Config(tenants={"default": {"calls_per_second": 5, "burst": 1}}))

    async def scenario() -> list[BaseException | None]:
        await q.take_calls("alice")  # the burst: never held
        with pytest.raises(RateLimited, match="retry in 0.2"):
            await q.take_calls("alice")  # the first refusal is immediate
        early = [asyncio.ensure_future(q.take_calls("alice")) for _ in range(3)]
        await asyncio.sleep(0)
        assert q.held("alice") == 3
        # A neighbour with its own bucket is neither held nor refused meanwhile.
        await q.take_calls("bob")
        assert q.held("bob") == 0
        assert q.held("alice") == 3
        return await asyncio.gather(*early, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    # Judged at the named time: one token had come back, the others refused.
    assert outcomes.count(None) == 1
    assert sum(isinstance(o, RateLimited) for o in outcomes) == 2
    assert q.held("alice") == 0


def test_holding_is_bounded_per_tenant(monkeypatch):
    monkeypatch.setattr(quotas_module, "MAX_HELD", 2)
    clock = Clock()
    q = quotas({"alice": {"calls_per_second": 1}}, clock)

    async def scenario() -> list[BaseException | None]:
        await q.take_calls("alice")
        with pytest.raises(RateLimited):
            await q.take_calls("alice")
        held = [asyncio.ensure_future(q.take_calls("alice")) for _ in range(2)]
        await asyncio.sleep(0)
        assert q.held("alice") == 2
        # Past the bound a call is judged at once: refused, not piled up.
        with pytest.raises(RateLimited):
            await q.take_calls("alice")
        clock.now = 1.0
        return await asyncio.gather(*held, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert outcomes.count(None) == 1
    assert q.held("alice") == 0


def test_a_batch_larger_than_the_burst_is_refused_at_once_even_when_early():
    clock = Clock()
    q = quotas({"alice": {"calls_per_second": 1, "burst": 2}}, clock)

    async def scenario() -> None:
        await q.take_calls("alice", 2)
        with pytest.raises(RateLimited, match="retry in"):
            await q.take_calls("alice")
        call = asyncio.ensure_future(q.take_calls("alice", 3))
        await asyncio.sleep(0)
        assert q.held("alice") == 0
        with pytest.raises(RateLimited, match="a batch of 3 calls exceeds"):
            await call

    asyncio.run(scenario())
