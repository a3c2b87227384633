"""Sessions outlive the daemon on the real engine: the agent keeps running
when its attach stream drops, and the next daemon of the instance re-adopts
it (files, cwd, env, background processes, calls still running).

In-process daemons here (a "crash" drops the server and every attach stream
without closing a session); tests/docker/test_chaos.py kills real daemon
processes with SIGKILL.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import grpc
import pytest

from runtime.client import Client, ToolrtRpcError
from runtime.errors import DaemonStopping
from tests.conftest import RunningDaemon
from tests.helpers import containers_of

pytestmark = pytest.mark.docker


def crash(running: RunningDaemon) -> None:
    """Like kill -9 for the sandboxes: the server and the attach streams go,
    no session is closed, nothing is acknowledged."""
    core = running.daemon.core

    async def drop() -> None:
        if running.daemon._flusher is not None:
            running.daemon._flusher.cancel()
        await core.reaper.stop()
        # The streams go first and in-flight calls end without a word to the
        # agents (a cancelled RPC would tell the agent to kill its command).
        gone = DaemonStopping("the daemon died")
        for session in core.manager.live_sessions():
            session.sandbox.abort("the daemon died", gone)
        await core.backend.close()
        await running.daemon.server.stop(0)

    running.run(drop())
    core.durable.close()
    running.loop.call_soon_threadsafe(running.loop.stop)
    running.thread.join(10)


def test_a_crashed_daemons_session_is_readopted_whole(instance, docker_client):
    first = instance()
    with Client(first.target) as client:
        session = client.create_session()
        sid = session.id
        assert client.call(sid, "shell", {"command": "mkdir -p d && cd d && echo hi > f"}).ok
        assert client.call(sid, "shell", {"command": "export K=v", "persist_env": True}).ok
        server = client.call(sid, "shell", {"command": "sleep 300", "background": True})
        assert server.ok
        answered = client.call(sid, "shell", {"command": "echo once >> /workspace/n"}, call_id="a")
    crash(first)
    container = docker_client.containers.get(f"toolrt-{sid}")
    assert container.status == "running"  # the agent outlived its daemon

    second = instance()
    with Client(second.target) as client:
        [again] = client.list_sessions()
        assert again.id == sid
        here = client.call(sid, "shell", {"command": 'pwd; cat f; echo "$K"'})
        assert here.output["stdout"].split() == ["/workspace/d", "hi", "v"]
        listed = client.call(sid, "process_list", {})
        assert [p["process_id"] for p in listed.output["processes"]] == [
            server.output["process_id"]
        ]
        repeat = client.call(sid, "shell", {"command": "echo once >> /workspace/n"}, call_id="a")
        assert repeat.output == answered.output
        count = client.call(sid, "shell", {"command": "wc -l < /workspace/n"})
        assert count.output["stdout"].strip() == "1"
        assert client.close_session(sid) == "closed"
    assert containers_of(docker_client, second.instance) == []


def test_a_call_running_through_a_crash_answers_its_real_result(instance):
    first = instance()
    with Client(first.target) as client:
        sid = client.create_session().id
        command = {"command": "sleep 2; echo ran >> /workspace/n; echo finished"}
        failed: dict[str, Any] = {}

        def call() -> None:
            try:
                client.call(sid, "shell", command, call_id="long")
            except ToolrtRpcError as exc:
                failed["code"] = exc.code

        caller = threading.Thread(target=call)
        caller.start()
        time.sleep(0.5)
        crash(first)
        caller.join(10)
    assert failed["code"] in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    second = instance()
    with Client(second.target) as client:
        result = client.call(sid, "shell", command, call_id="long")  # waits for it
        assert result.ok and result.output["stdout"] == "finished\n"
        count = client.call(sid, "shell", {"command": "wc -l < /workspace/n"})
        assert count.output["stdout"].strip() == "1"
    # Stored once answered: the next daemon answers from its journal.
    second.stop()
    third = instance()
    with Client(third.target) as client:
        assert client.call(sid, "shell", command, call_id="long").output == result.output


def test_sigterm_keep_answers_unavailable_and_the_retry_gets_the_result(instance, docker_client):
    first = instance()
    with Client(first.target) as client:
        sid = client.create_session().id
        command = {"command": "sleep 1.5; echo kept"}
        failed: dict[str, Any] = {}

        def call() -> None:
            try:
                client.call(sid, "shell", command, call_id="k")
            except ToolrtRpcError as exc:
                failed["code"] = exc.code

        caller = threading.Thread(target=call)
        caller.start()
        time.sleep(0.5)
        first.stop()  # shutdown = "keep"
        caller.join(10)
    assert failed["code"] == grpc.StatusCode.UNAVAILABLE
    assert docker_client.containers.get(f"toolrt-{sid}").status == "running"
    second = instance()
    with Client(second.target) as client:
        result = client.call(sid, "shell", command, call_id="k")
        assert result.ok and result.output["stdout"] == "kept\n"


def test_a_container_gone_while_down_is_closed_as_lost(instance, docker_client):
    first = instance()
    with Client(first.target) as client:
        sid = client.create_session().id
    crash(first)
    docker_client.containers.get(f"toolrt-{sid}").remove(force=True)
    second = instance()
    with Client(second.target) as client:
        lost = client.get_session(sid)
        assert (lost.state, lost.closed_reason) == ("closed", "sandbox_lost")
        assert client.list_sessions() == []
