"""`shell` end to end through gRPC against a real sandbox."""

from __future__ import annotations

import json
import time

import grpc
import psutil
import pytest

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from tests.helpers import under_gvisor, user_processes

pytestmark = pytest.mark.docker


def test_result_is_tied_to_the_call_id_and_carries_exit_code(session):
    result = session.call("shell", {"command": "echo out; echo err >&2; exit 3"}, call_id="call-7")
    assert result.call_id == "call-7"
    assert result.ok
    assert result.output == {
        "exit_code": 3,
        "stdout": "out\n",
        "stderr": "err\n",
        "stdout_truncated": False,
        "stderr_truncated": False,
        "stdout_total_bytes": 4,
        "stderr_total_bytes": 4,
        "timed_out": False,
    }


def test_commands_run_in_utf8_with_the_locale_mapped_from_one_archive(session):
    # The default image keeps C.UTF-8 in a locale archive (setup.sh): the
    # call's bash maps that one file, none of the locale's dozen, and a
    # multibyte character is still one character.
    result = session.shell(
        "locale charmap; printf '\\303\\251' | wc -m; "
        "grep -c /usr/lib/locale/locale-archive /proc/$$/maps; "
        "grep -c /usr/lib/locale/C.utf8/ /proc/$$/maps"
    )
    assert result.output["stdout"].split() == ["UTF-8", "1", "1", "0"]


def test_killed_command_reports_128_plus_signal(session):
    assert session.shell("kill -TERM $$").output["exit_code"] == 143


def test_cwd_env_and_timeout_arguments(session):
    session.shell("mkdir -p /workspace/sub")
    result = session.shell("pwd; echo $GREETING", cwd="/workspace/sub", env={"GREETING": "hi"})
    assert result.output["stdout"] == "/workspace/sub\nhi\n"
    missing = session.shell("pwd", cwd="/workspace/nope")
    assert missing.error_code == "NOT_FOUND"


def test_timeout_kills_setsid_and_double_forked_children(session, docker_client):
    started = time.monotonic()
    result = session.shell(
        "sleep 300 & setsid sleep 301 & (setsid bash -c 'sleep 302 &' &) ; echo started; sleep 303",
        timeout_s=1.5,
    )
    elapsed = time.monotonic() - started
    assert result.error_code == "TIMEOUT"
    assert result.output["timed_out"] is True
    assert result.output["stdout"] == "started\n"  # the output so far
    # Killed at the deadline, not after sleep 303 (slack for a loaded host).
    assert elapsed < 1.5 + 10
    leftovers = [p for p in user_processes(docker_client, session.id) if "sleep" in p]
    assert leftovers == []


def test_client_cancellation_kills_the_calls_processes(client, session, docker_client):
    call = pb.ToolCall(
        id="cancel-me",
        name="shell",
        arguments_json=json.dumps({"command": "setsid sleep 311 & sleep 312"}),
    )
    with pytest.raises(grpc.RpcError) as err:
        client.stub.Execute(pb.ExecuteRequest(session_id=session.id, call=call), timeout=1.5)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    deadline = time.monotonic() + 10
    while any("sleep 31" in p for p in user_processes(docker_client, session.id)):
        assert time.monotonic() < deadline, "cancelled call left processes behind"
        time.sleep(0.2)
    assert session.shell("echo next").output["stdout"] == "next\n"


def test_background_child_does_not_hold_the_call_open(session, docker_client):
    started = time.monotonic()
    result = session.shell("(sleep 30; echo late) & echo now")
    assert time.monotonic() - started < 5
    assert result.ok and result.output["stdout"] == "now\n"
    assert any("sleep 30" in p for p in user_processes(docker_client, session.id))
    # A background child that keeps printing is drained, not blocked or killed.
    session.shell("(for i in $(seq 1 2000); do printf '%01000d' 0; done; touch /tmp/done) &")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if session.shell("test -e /tmp/done").output["exit_code"] == 0:
            break
        time.sleep(0.2)
    else:
        pytest.fail("a background writer was blocked once its call returned")


@pytest.mark.timeout(300)
def test_output_flood_is_capped_and_daemon_memory_stays_flat(client):
    # Under gVisor every pipe write goes through its user-space kernel: 1.5 GB
    # outlasted the call's 120 s in a clean run, so it floods 400 MB there,
    # still six times the memory the daemon may grow by.
    flood_bytes = 400_000_000 if under_gvisor() else 1_500_000_000
    daemon_process = psutil.Process()
    with client.session(limits={"output_cap_bytes": 64 * 1024}) as session:
        session.shell("true")
        before = daemon_process.memory_info().rss
        result = session.shell(
            f"head -c {flood_bytes} /dev/zero | tr '\\0' 'x'; echo done >&2", timeout_s=240
        )
        after = daemon_process.memory_info().rss
    assert result.ok, result
    out = result.output
    assert out["stdout_truncated"] is True
    assert out["stdout_total_bytes"] == flood_bytes
    assert out["stderr"] == "done\n"
    assert len(out["stdout"]) < 64 * 1024 + 200  # the cap plus the marker
    assert after - before < 64 << 20, f"daemon RSS grew by {(after - before) >> 20} MiB"


def test_invalid_utf8_never_breaks_the_result(session):
    result = session.shell("printf 'a\\xff\\xfeb'")
    assert result.ok
    assert result.output["stdout"] == "a\ufffd\ufffdb"
    assert result.output["invalid_utf8_replaced"] is True


def test_memory_bomb_is_limit_exceeded_and_session_survives(client):
    small = {"memory_bytes": 128 << 20, "workspace_bytes": 32 << 20, "tmp_bytes": 16 << 20}
    with client.session(limits=small) as session:
        bomb = session.shell("python3 -c 'x = bytearray(1 << 30); print(len(x))'", timeout_s=60)
        if under_gvisor() and bomb.error_code == "SANDBOX_LOST":
            # DESIGN, platform notes: gVisor has no OOM killer inside, the
            # sandbox ends instead, and the result says so; the host is fine.
            with client.session() as fresh:
                assert fresh.shell("echo next").output["stdout"] == "next\n"
            return
        assert bomb.error_code == "LIMIT_EXCEEDED", bomb
        assert "memory" in bomb.error_message
        after = session.shell("echo still here")
        assert after.ok and after.output["stdout"] == "still here\n"


def test_fork_bomb_hits_pids_limit_and_agent_still_answers(client, docker_client):
    with client.session(limits={"pids": 64}) as session, client.session() as neighbour:
        started = time.monotonic()
        bomb = session.shell("bomb() { bomb | bomb & }; bomb; sleep 30", timeout_s=3)
        if under_gvisor() and bomb.error_code == "SANDBOX_LOST":
            # DESIGN, platform notes: gVisor enforces the pids limit on its
            # host cgroup, which may end the sandbox; never its neighbours.
            assert neighbour.shell("echo fine").output["stdout"] == "fine\n"
            return
        assert bomb.error_code == "TIMEOUT", bomb
        assert time.monotonic() - started < 3 + 10  # not the 30 s sleep
        # The agent answers, the bomb is gone, and other sessions never noticed.
        answer = session.shell("echo alive")
        assert answer.ok and answer.output["stdout"] == "alive\n"
        assert user_processes(docker_client, session.id) == []
        assert neighbour.shell("echo fine").output["stdout"] == "fine\n"


def test_streaming_delivers_chunks_before_the_end(client, session):
    arrivals = []
    started = time.monotonic()
    for event in client.stream(
        session.id, "shell", {"command": "echo first; sleep 1.5; echo second >&2"}
    ):
        arrivals.append((time.monotonic() - started, event))
    assert arrivals[0][1] == ("stdout", b"first\n")
    assert arrivals[0][0] < 1.0  # before the command ended
    assert arrivals[1][1] == ("stderr", b"second\n")
    final = arrivals[-1][1]
    assert len(arrivals) == 3 and final.ok and final.output["stdout"] == "first\n"


def test_batch_results_come_back_in_call_order(client, session):
    calls = [
        pb.ToolCall(id=f"c{i}", name="shell", arguments_json=json.dumps({"command": f"echo {i}"}))
        for i in range(4)
    ]
    calls.insert(2, pb.ToolCall(id="bad", name="shell", arguments_json="{not json"))
    reply = client.stub.ExecuteBatch(pb.ExecuteBatchRequest(session_id=session.id, calls=calls))
    assert [r.call_id for r in reply.results] == ["c0", "c1", "bad", "c2", "c3"]
    assert reply.results[2].error.code == "INVALID_ARGUMENTS"
    assert [json.loads(r.output_json).get("stdout") for r in reply.results] == [
        "0\n",
        "1\n",
        None,
        "2\n",
        "3\n",
    ]


def test_validation_failures_run_nothing(session):
    bad = session.call("shell", {"command": "touch /workspace/ran", "bogus": 1})
    assert bad.error_code == "INVALID_ARGUMENTS"
    assert "/bogus" in bad.error_message
    assert bad.output == {}
    assert session.shell("test -e /workspace/ran").output["exit_code"] == 1
    unknown = session.call("rm_rf", {})
    assert unknown.error_code == "UNKNOWN_TOOL" and "shell" in unknown.error_message
