"""The per-call path under load: no lost or crossed results (a smaller
version of the benchmark's 64-session run), and what each command inherits."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from runtime.client import Client

pytestmark = pytest.mark.docker

SESSIONS = 12
CALLERS_PER_SESSION = 4
CALLS_PER_CALLER = 12


def test_concurrent_sessions_and_callers_get_their_own_results(make_daemon):
    running = make_daemon(pool_size=2)
    with Client(running.target) as client:
        with ThreadPoolExecutor(SESSIONS) as ex:
            sessions = list(ex.map(lambda _: client.create_session().id, range(SESSIONS)))
        assert len(set(sessions)) == SESSIONS

        def caller(session_id: str, n: int) -> list[str]:
            problems = []
            for i in range(CALLS_PER_CALLER):
                token = f"{session_id}-{n}-{i}-{uuid.uuid4().hex[:8]}"
                call_id = f"c-{token}"
                command = f"echo {token}; sleep 0.00$((RANDOM % 5))"
                result = client.call(session_id, "shell", {"command": command}, call_id=call_id)
                if result.call_id != call_id or not result.ok:
                    problems.append(f"{call_id}: {result}")
                elif result.output["stdout"] != f"{token}\n":
                    problems.append(f"{call_id} got {result.output['stdout']!r}")
            return problems

        with ThreadPoolExecutor(SESSIONS * CALLERS_PER_SESSION) as ex:
            futures = [
                ex.submit(caller, sid, n) for sid in sessions for n in range(CALLERS_PER_SESSION)
            ]
            problems = [p for f in futures for p in f.result(timeout=300)]
        assert problems == []
        with ThreadPoolExecutor(SESSIONS) as ex:
            list(ex.map(client.close_session, sessions))


def test_commands_are_first_for_the_oom_killer_and_the_agent_is_not(session):
    result = session.shell("cat /proc/self/oom_score_adj /proc/1/oom_score_adj; id -G")
    assert result.ok, result
    adj, agent_adj, gid, call_group = result.output["stdout"].split()
    # The sandbox user's group and the call's own (tracker.py), no other.
    assert [adj, agent_adj, gid] == ["1000", "0", "1000"] and int(call_group) >= 200_000
