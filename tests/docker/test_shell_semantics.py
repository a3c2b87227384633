"""`shell` semantics agents rely on, against a real sandbox: directory and
environment that persist, no hanging on prompts, silence detection, capped
head-and-tail output."""

from __future__ import annotations

import json
import time

import pytest

from tests.helpers import user_processes

pytestmark = pytest.mark.docker

# Generous: the machine is shared, only "returns promptly" matters.
PROMPT_SLACK_S = 10


def test_cwd_outside_the_read_roots_runs_there(session):
    # The default roots are /workspace only: they govern the file tools.
    assert session.shell("pwd", cwd="/tmp").output["stdout"] == "/tmp\n"
    assert "note" not in session.shell("cd /etc").output
    assert session.shell("pwd").output["stdout"] == "/etc\n"


def test_cd_persists_across_calls(session):
    _cd_persists(session)


def _cd_persists(session):
    assert session.shell("mkdir -p /workspace/src/pkg && cd /workspace/src").ok
    assert session.shell("pwd").output["stdout"] == "/workspace/src\n"
    assert session.shell("cd pkg").ok
    assert session.shell("pwd").output["stdout"] == "/workspace/src/pkg\n"
    # An explicit cwd runs there, and the call's final directory is kept.
    assert session.shell("pwd", cwd="/tmp").output["stdout"] == "/tmp\n"
    assert session.shell("pwd").output["stdout"] == "/tmp\n"
    # Anywhere the sandbox user may enter (the allowlist governs file tools).
    left = session.shell("cd /etc && pwd")
    assert left.output["stdout"] == "/etc\n" and "note" not in left.output
    assert session.shell("pwd").output["stdout"] == "/etc\n"
    # A session's directory is its own.
    other = session.client.session()
    with other:
        assert other.shell("pwd").output["stdout"] == "/workspace\n"


def test_a_removed_working_directory_falls_back_to_the_workspace(session):
    session.shell("mkdir -p /workspace/gone && cd /workspace/gone")
    # Runs in the directory, removes it, and ends in a directory that is gone.
    assert session.shell("rmdir /workspace/gone").ok
    result = session.shell("pwd")
    assert result.ok, result
    assert result.output["stdout"] == "/workspace\n"
    assert "no longer exists" in result.output["note"]


def test_exports_persist_only_with_persist_env(session):
    session.shell("export ONE=1")
    assert session.shell("echo ${ONE-unset}").output["stdout"] == "unset\n"
    session.shell("export TWO='two words'; unset CI", persist_env=True)
    assert session.shell("echo $TWO/${CI-unset}").output["stdout"] == "two words/unset\n"
    # Variables given with `env` are for their call only, even with persist_env.
    session.shell("true", env={"THREE": "3"}, persist_env=True)
    assert session.shell("echo ${THREE-unset}").output["stdout"] == "unset\n"
    session.shell("unset TWO", persist_env=True)
    assert session.shell("echo ${TWO-unset}").output["stdout"] == "unset\n"


def test_wrapper_changes_neither_exit_code_nor_output(session):
    result = session.shell("set -o noclobber; umask 077; echo out; echo err >&2; exit 7")
    assert result.output["exit_code"] == 7
    assert (result.output["stdout"], result.output["stderr"]) == ("out\n", "err\n")
    syntax = session.shell("echo fine\nfi")
    assert syntax.output["exit_code"] == 2
    assert "line 2" in syntax.output["stderr"]


def test_prompts_return_promptly_with_the_prompt_visible(session):
    started = time.monotonic()
    py = session.shell("python3 -c 'input(\"Continue? [y/N] \")'")
    assert py.output["stdout"] == "Continue? [y/N] "
    assert "EOFError" in py.output["stderr"]
    # bash prints a `read -p` prompt only on a terminal; the read itself
    # gets end-of-file at once instead of waiting.
    read = session.shell("read -p 'Continue? [y/N] ' answer; echo status=$?")
    assert read.output["stdout"] == "status=1\n"
    shown = session.shell("printf 'Overwrite? [y/N] ' >&2; read answer; echo status=$?")
    assert shown.output["stderr"] == "Overwrite? [y/N] "
    git = session.shell(
        "git init -q repo && cd repo && "
        "git -c user.email=a@example.com -c user.name=a commit --allow-empty"
    )
    assert git.output["exit_code"] != 0
    assert "-m" in git.output["stderr"]
    assert time.monotonic() - started < PROMPT_SLACK_S


def test_silent_command_moves_to_the_background_and_is_found_read_and_killed(
    session, docker_client
):
    result = session.shell(
        "printf 'Continue? [y/N] '; sleep 4; echo resumed; sleep 612", idle_timeout_s=1
    )
    assert result.error_code == "TIMEOUT"
    out = result.output
    assert out["reason"] == "idle" and out["timed_out"] is True
    assert out["stdout"] == "Continue? [y/N] "  # what it was waiting on
    assert out["state"] == "running" and out["exit_code"] is None
    handle = out["process_id"]
    assert handle in result.error_message
    listed = session.call("process_list", {}).output["processes"]
    assert [(p["process_id"], p["state"]) for p in listed] == [(handle, "running")]
    assert "sleep 612" in listed[0]["command"]
    # The session goes on meanwhile.
    assert session.shell("echo meanwhile").output["stdout"] == "meanwhile\n"
    read = session.call("process_output", {"process_id": handle, "wait_for": "resum"})
    assert read.ok and read.output["matched"] is True
    assert read.output["output"] == "resumed\n"
    killed = session.call("process_kill", {"process_id": handle})
    assert killed.ok and killed.output["state"] == "killed"
    assert not any("sleep 612" in p for p in user_processes(docker_client, session.id))
    assert session.call("process_list", {}).output["processes"][0]["state"] == "killed"


def test_on_idle_kill_deadline_and_chatty_commands(session, docker_client):
    killed = session.shell("sleep 613", idle_timeout_s=1, on_idle="kill")
    assert killed.error_code == "TIMEOUT"
    assert killed.output["reason"] == "idle" and "process_id" not in killed.output
    deadline = session.shell("sleep 614", timeout_s=1, idle_timeout_s=30)
    assert deadline.error_code == "TIMEOUT" and deadline.output["reason"] == "deadline"
    assert not any("sleep 61" in p for p in user_processes(docker_client, session.id))
    assert session.call("process_list", {}).output["processes"] == []
    # Output resets the silence timer.
    chatty = session.shell("for i in 1 2 3 4 5 6; do echo $i; sleep 0.4; done", idle_timeout_s=1.5)
    assert chatty.ok and chatty.output["stdout"].split() == ["1", "2", "3", "4", "5", "6"]


def test_output_over_the_cap_keeps_head_and_tail_with_exact_counts(session):
    result = session.shell("yes | head -c 5000000")
    out = result.output
    assert result.ok and out["stdout_truncated"] is True
    assert out["stdout_total_bytes"] == 5_000_000
    cap = 1 << 20  # the default output cap
    head, tail = int(cap * 0.2), cap - int(cap * 0.2)
    dropped = 5_000_000 - cap
    # "y\n" repeated: the newlines are at odd offsets of the dropped range.
    first, end = head, 5_000_000 - tail
    start = first if first % 2 else first + 1
    dropped_lines = len(range(start, end, 2))
    marker = (
        f"\n[... {dropped} bytes ({dropped_lines} lines) dropped; "
        f"kept the first {head} and the last {tail} bytes ...]\n"
    )
    text = out["stdout"]
    assert marker in text
    before, after = text.split(marker)
    assert len(before) == head and len(after) == tail
    assert before.startswith("y\ny\n") and after.endswith("y\n")


def test_head_fraction_is_configurable(make_daemon):
    from runtime.client import Client

    daemon = make_daemon(shell={"head_fraction": 0.5})
    with (
        Client(daemon.target) as client,
        client.session(limits={"output_cap_bytes": 1000}) as session,
    ):
        out = session.shell("seq 1 10000").output
    head, _, tail = out["stdout"].partition("\n[... ")
    assert head.startswith("1\n2\n") and len(head) in (499, 500)
    assert "kept the first 500 and the last 500 bytes" in out["stdout"]
    assert tail.endswith("9999\n10000\n")


def test_ansi_colours_are_stripped(session):
    result = session.shell(r"printf '\033[1;31mred\033[0m \033]0;title\007plain\n'")
    assert result.output["stdout"] == "red plain\n"


def test_stdin_text_merge_output_and_pipefail(session):
    fed = session.shell("tr a-z A-Z", stdin="hello\nworld\n")
    assert fed.output["stdout"] == "HELLO\nWORLD\n"
    merged = session.shell("for i in 1 2 3; do echo out$i; echo err$i >&2; done", merge_output=True)
    assert merged.output["stdout"] == "out1\nerr1\nout2\nerr2\nout3\nerr3\n"
    assert merged.output["stderr"] == ""
    assert session.shell("false | true").output["exit_code"] == 0
    assert session.shell("false | true", pipefail=True).output["exit_code"] == 1


@pytest.mark.parametrize(
    "arguments",
    [
        '{"command": "true", "timeout_s": 0}',
        '{"command": "true", "timeout_s": -5}',
        '{"command": "true", "timeout_s": NaN}',
        '{"command": "true", "idle_timeout_s": 0}',
        '{"command": "true", "on_idle": "wait"}',
        '{"command": "true", "stdin": 5}',
        '{"command": "true", "background": [true]}',
    ],
)
def test_bad_shell_arguments_are_refused(session, arguments):
    result = session.call("shell", arguments)
    assert result.error_code == "INVALID_ARGUMENTS", result
    assert result.output == {}


def test_timeout_is_clamped_to_the_session_maximum(client):
    with client.session(limits={"call_timeout_s": 2}) as session:
        result = session.shell("sleep 615", timeout_s=1e9)
        assert result.error_code == "TIMEOUT" and result.output["reason"] == "deadline"
        assert "2 s" in result.error_message


def test_catalog_describes_the_new_arguments_and_tools(client):
    tools = {t["name"]: t for t in client.list_tools()}
    assert {"shell", "process_list", "process_output", "process_kill"} <= set(tools)
    properties = tools["shell"]["parameters"]["properties"]
    for name in (
        "idle_timeout_s",
        "on_idle",
        "stdin",
        "background",
        "pipefail",
        "merge_output",
        "persist_env",
    ):
        assert name in properties, name
    description = tools["shell"]["description"]
    assert "idle_timeout_s" in description and "process_output" in description
    assert json.dumps(tools["process_output"]["parameters"]).count("wait_for") >= 1
