"""The adaptive warm pool on the fake backend: one ready container when idle,
growing with a burst of creates, shrinking back once the burst is a window
old, bounded by its ceiling and by admission."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from runtime.client import Client
from runtime.observability.window import PerSecond
from tests.helpers import ManualClock, wait_for

WINDOW_S = 2.0


def test_per_second_keeps_the_busiest_second_of_its_window():
    clock = ManualClock(1000.0)
    window = PerSecond(10, clock)
    assert window.peak() == 0 and window.rate() == 0
    for _ in range(5):
        window.note()
    clock.now += 1
    window.note(2)
    assert window.peak() == 5
    assert window.rate() == pytest.approx(0.7)
    clock.now += 10  # the burst's second is a window old; the later one is not
    assert window.peak() == 2
    clock.now += 1
    assert window.peak() == 0


def create_at_once(target: str, count: int) -> list[str]:
    ids: list[str] = []
    lock = threading.Lock()

    def one() -> None:
        with Client(target) as client:
            session = client.create_session()
        with lock:
            ids.append(session.id)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return ids


def test_the_pool_follows_a_burst_then_an_idle_spell(make_daemon):
    clock = ManualClock(1000.0)
    running = make_daemon(
        backend="fake", pool_size=6, pool_min=1, pool_window_s=WINDOW_S, clock=clock
    )
    pool = running.daemon.core.manager.pool
    backend = running.daemon.core.backend
    # Idle: one ready container of the one profile.
    wait_for(lambda: pool.ready() == 1)
    time.sleep(0.3)
    assert pool.ready() == 1 and len(backend.sandboxes) == 1
    (status,) = pool.status()
    assert (status.ready, status.target) == (1, 1)

    # A burst of 5 creates: the first is warm, the pool grows to what the burst needed.
    sizes: list[int] = []
    ids = create_at_once(running.target, 5)
    assert len(ids) == 5
    wait_for(lambda: pool.ready() == 5)
    assert pool.status()[0].target == 5
    with Client(running.target) as client:
        # The next burst is served warm: every id was waiting in the pool.
        warm = set(backend.sandboxes) - set(ids)
        again = create_at_once(running.target, 3)
        assert set(again) <= warm
        for session_id in ids + again:
            client.close_session(session_id)

    # Idle again: once the burst is a window old, the surplus goes.
    time.sleep(0.3)
    assert pool.ready() >= 3  # within the window, it stays
    clock.advance(WINDOW_S + 1)
    started = time.monotonic()
    while time.monotonic() - started < 10:
        sizes.append(pool.ready())
        if sizes[-1] == 1:
            break
        time.sleep(0.05)
    assert sizes[0] >= 3 and sizes[-1] == 1
    assert sizes == sorted(sizes, reverse=True)  # it only shrinks while idle
    assert len(backend.sandboxes) == 1  # the removed containers are gone


def test_the_pool_never_exceeds_its_ceiling(make_daemon):
    running = make_daemon(backend="fake", pool_size=3, pool_min=1, pool_window_s=WINDOW_S)
    pool = running.daemon.core.manager.pool
    wait_for(lambda: pool.ready() == 1)
    ids = create_at_once(running.target, 6)
    wait_for(lambda: pool.ready() == 3)
    time.sleep(0.5)
    assert pool.ready() == 3 and pool.status()[0].target == 3
    with Client(running.target) as client:
        for session_id in ids:
            client.close_session(session_id)


def test_pool_min_zero_lets_an_idle_pool_empty(make_daemon):
    clock = ManualClock(1000.0)
    running = make_daemon(
        backend="fake", pool_size=4, pool_min=0, pool_window_s=WINDOW_S, clock=clock
    )
    pool = running.daemon.core.manager.pool
    time.sleep(0.3)
    assert pool.ready() == 0
    with Client(running.target) as client:
        first = client.create_session()  # cold: nothing was ready
        wait_for(lambda: pool.ready() == 1)  # the demand it showed
        client.close_session(first.id)
        clock.advance(WINDOW_S + 1)  # the demand is a window old
        wait_for(lambda: pool.ready() == 0)


def test_a_full_daemon_gives_a_warm_slot_to_a_session_that_cannot_use_it(make_daemon):
    running = make_daemon(backend="fake", pool_size=2, pool_min=2, max_sessions=2)
    pool = running.daemon.core.manager.pool
    wait_for(lambda: pool.ready() == 2)
    with Client(running.target) as client:
        # Labels of its own: the pool cannot serve it, so a warm container makes room.
        labelled = client.create_session(labels={"team": "a"})
        assert pool.ready() == 1
        assert len(running.daemon.core.backend.sandboxes) == 2
        client.close_session(labelled.id)
        wait_for(lambda: pool.ready() == 2)


def test_a_full_daemon_gives_a_session_the_slot_of_a_container_still_being_created(make_daemon):
    running = make_daemon(backend="fake", pool_size=1, pool_min=1, max_sessions=2)
    pool = running.daemon.core.manager.pool
    backend = running.daemon.core.backend
    wait_for(lambda: pool.ready() == 1)
    create = backend.create
    created = threading.Event()

    async def held_create(spec):  # the pool's next container: created when the test says
        while not created.is_set():
            await asyncio.sleep(0.01)
        return await create(spec)

    backend.create = held_create
    with Client(running.target) as client:
        first = client.create_session()  # the warm one; the pool starts another
        wait_for(lambda: pool.count() == 1)
        backend.create = create  # the sessions' own creates are not held
        # The daemon is full with a container still being created: the session
        # takes its slot instead of being refused.
        second = client.create_session()
        assert {first.id, second.id} <= set(backend.sandboxes)
        # The given-up container is destroyed once its create ends, and the
        # pool starts no other while the sessions fill the daemon.
        created.set()
        wait_for(lambda: len(backend.sandboxes) == 2, timeout=10)
        time.sleep(0.5)
        assert len(backend.sandboxes) == 2 and pool.count() == 0
        client.close_session(second.id)
        wait_for(lambda: pool.ready() == 1)
