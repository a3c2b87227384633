"""The static agent (`agent = "static"`, static-agent/ in Go) in real sandboxes:
on the default image, and on a BusyBox-only image without Python, built here
offline from Debian's busybox-static (`make go` installs it)."""

from __future__ import annotations

import io
import shutil
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.client import Client
from runtime.sandbox.agent_dir import HELPER, STATIC_AGENT
from tests.docker import test_exec_holes as holes
from tests.docker import test_file_tools as file_tools
from tests.docker import test_restarts as restarts
from tests.docker import test_shell as shell_tests
from tests.docker import test_shell_semantics as semantics

pytestmark = pytest.mark.docker

AGENT_DIR = Path(__file__).resolve().parents[2] / "runtime" / "agent"
BUSYBOX = "/bin/busybox"


@pytest.fixture(scope="module")
def busybox_image(docker_client: Any) -> Iterator[str]:
    """An image holding a static BusyBox and nothing else: no python3, no
    bash, no /etc/passwd."""
    if not Path(BUSYBOX).is_file():
        pytest.fail(f"{BUSYBOX} is missing: `make go` installs busybox-static")
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for folder in ("bin", "workspace", "tmp", "proc", "dev", "sys", "etc", "opt/toolrt/agent"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        tar.add(BUSYBOX, arcname="bin/busybox")
        for applet in ("sh", "echo", "cat", "ls", "mkdir", "sleep", "pwd", "id"):
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
    name = f"toolrt-test-busybox:{uuid.uuid4().hex[:8]}"
    repository, tag = name.split(":")
    docker_client.api.import_image_from_data(data.getvalue(), repository=repository, tag=tag)
    try:
        yield name
    finally:
        docker_client.images.remove(name, force=True)


@pytest.fixture
def static_client(make_daemon: Any) -> Iterator[Any]:
    from runtime.client.sdk import Client

    for name in (STATIC_AGENT, HELPER):
        if not (AGENT_DIR / name).is_file():
            pytest.fail(f"{AGENT_DIR / name} is missing: `make agent` builds it")
    daemon = make_daemon(agent="static")
    with Client(daemon.target) as client:
        yield client


def check_the_basic_tools(session: Any) -> None:
    result = session.shell("echo out; echo err >&2; exit 3")
    assert result.ok, result.error_message
    out = result.output
    assert (out["exit_code"], out["stdout"], out["stderr"]) == (3, "out\n", "err\n")
    assert (out["stdout_total_bytes"], out["stdout_truncated"], out["timed_out"]) == (
        4,
        False,
        False,
    )
    # The container's main process is the static agent, and commands run as
    # the sandbox user whether or not the image names it.
    who = session.shell("cat /proc/1/comm; id -u; cat", stdin="from stdin")
    assert who.output["stdout"] == f"{STATIC_AGENT}\n1000\nfrom stdin"

    written = session.call("write_file", {"path": "/workspace/d/notes.txt", "content": "a\nb\n"})
    assert written.ok, written.error_message
    read = session.call("read_file", {"path": "/workspace/d/notes.txt"})
    assert read.ok, read.error_message
    assert "a" in read.output["content"] and "b" in read.output["content"]
    assert session.shell("cat d/notes.txt").output["stdout"] == "a\nb\n"
    missing = session.call("read_file", {"path": "/workspace/none.txt"})
    assert missing.error_code == "NOT_FOUND"

    timed_out = session.shell("echo started; sleep 60", timeout_s=1)
    assert timed_out.error_code == "TIMEOUT"
    assert timed_out.output["stdout"] == "started\n"
    assert session.shell("echo still serving").output["stdout"] == "still serving\n"


def test_static_agent_serves_the_default_image(static_client: Any) -> None:
    with static_client.session() as session:
        check_the_basic_tools(session)
        assert session.shell("echo $BASH_VERSION").output["stdout"] != "\n"
        unsupported = session.shell("sleep 1", background=True)
        assert unsupported.error_code == "INVALID_ARGUMENTS"
        assert "static agent" in unsupported.error_message
        assert session.shell("echo after").output["stdout"] == "after\n"


def test_stdin_nobody_reads_holds_nothing_after_the_call(static_client: Any) -> None:
    # A background child keeps the pipe open and never reads: each call's
    # unwritten stdin must not keep one of the agent's threads waiting.
    threads = "grep Threads /proc/1/status"
    with static_client.session() as session:
        before = int(session.shell(threads).output["stdout"].split()[1])
        for _ in range(8):
            result = session.shell("sleep 60 <&0 & exit 0", stdin="x" * (256 << 10))
            assert result.ok and result.output["exit_code"] == 0, result
        after = int(session.shell(threads).output["stdout"].split()[1])
        assert after - before < 4, (before, after)


def test_static_agent_serves_a_busybox_only_image(static_client: Any, busybox_image: str) -> None:
    with static_client.session(image=busybox_image) as session:
        check_the_basic_tools(session)
        # No bash in the image: commands run under its sh, which reports its
        # directory as bash does (its exports are not kept, and it says so).
        assert session.shell("echo ${BASH_VERSION-not bash}").output["stdout"] == "not bash\n"
        assert session.shell("mkdir -p /workspace/sub && cd /workspace/sub").ok
        assert session.shell("pwd").output["stdout"] == "/workspace/sub\n"
        exported = session.shell("export K=v; exit 4", persist_env=True)
        assert exported.output["exit_code"] == 4
        assert "only under bash" in exported.output["note"]
        assert session.shell("echo ${K-unset}; pwd").output["stdout"] == "unset\n/workspace/sub\n"


def test_the_daemon_refuses_a_static_agent_it_does_not_have(tmp_path: Path) -> None:
    from runtime.sandbox.agent_dir import require_static_agent

    shutil.copy(AGENT_DIR / HELPER, tmp_path / HELPER)
    with pytest.raises(ValueError, match="make agent"):
        require_static_agent(str(tmp_path))


# The Python agent's checks of the shell state and of killing trees, run on
# the static agent unchanged: (static client, session, docker client).
PYTHON_AGENT_CHECKS = {
    "cd persists": lambda c, s, d: semantics._cd_persists(s),
    "exports persist": lambda c, s, d: semantics.test_exports_persist_only_with_persist_env(s),
    "the wrapper is invisible": (
        lambda c, s, d: semantics.test_wrapper_changes_neither_exit_code_nor_output(s)
    ),
    "a removed cwd": (
        lambda c, s, d: semantics.test_a_removed_working_directory_falls_back_to_the_workspace(s)
    ),
    "a cwd it cannot enter": (
        lambda c, s, d: holes.test_a_directory_the_shell_cannot_enter_sends_it_home_with_a_note(s)
    ),
    "no forged state": (
        lambda c, s, d: (
            holes.test_a_child_process_cannot_forge_the_state_and_junk_is_ignored_with_a_note(s)
        )
    ),
    "a group it cannot shed": lambda c, s, d: (
        holes.test_each_call_is_marked_by_a_group_it_cannot_shed(s)
    ),
    "a timeout kills escaped children": (
        lambda c, s, d: shell_tests.test_timeout_kills_setsid_and_double_forked_children(s, d)
    ),
    "no survivor under cpu pressure": (
        lambda c, s, d: holes.test_a_timeout_under_cpu_pressure_leaves_no_survivor(c, s, d)
    ),
}
# The file tools' checks, which need a session only.
PYTHON_AGENT_CHECKS.update(
    {
        name: (lambda check: lambda c, s, d: check(s))(getattr(file_tools, f"test_{name}"))
        for name in (
            "write_then_read_as_the_sandbox_user",
            "write_replaces_atomically_and_keeps_the_mode",
            "read_pages_by_lines_and_flags_binary",
            "read_errors",
            "edit_file_exact_match_count_and_diff",
            "list_files_flat_recursive_and_capped",
            "run_tests_counts_and_failures_from_junit",
            "symlinks_to_outside_are_resolved_then_denied",
            "symlink_swapped_in_a_loop_never_lets_a_write_out",
        )
    }
)


@pytest.mark.parametrize("name", PYTHON_AGENT_CHECKS)
def test_static_agent_passes_the_python_agents_checks(
    static_client: Any, docker_client: Any, name: str
) -> None:
    # The default allowlist, as the checks' own sessions have; cd's check
    # moves to /tmp, which its session may read.
    roots = ["/workspace", "/tmp"] if name == "cd persists" else ["/workspace"]
    with static_client.session(allowlist={"read_roots": roots, "write_roots": roots}) as session:
        PYTHON_AGENT_CHECKS[name](static_client, session, docker_client)


def test_a_timeout_sends_term_first_then_kills(static_client: Any) -> None:
    with static_client.session() as session:
        polite = session.shell(
            "trap 'echo cleaned up; exit 0' TERM; echo started; while :; do sleep 0.1; done",
            timeout_s=1,
        )
        assert polite.error_code == "TIMEOUT"
        assert polite.output["stdout"] == "started\ncleaned up\n"
        deaf = session.shell("trap '' TERM; echo started; while :; do sleep 0.1; done", timeout_s=1)
        assert deaf.error_code == "TIMEOUT"
        assert deaf.output["exit_code"] == 137


def test_a_call_running_through_a_daemon_crash_answers_once(instance: Any) -> None:
    # The Python agent's restart check: the next daemon re-adopts the session,
    # its resumed call waits for the running one's answer, which ran once.
    restarts.test_a_call_running_through_a_crash_answers_its_real_result(
        lambda **overrides: instance(agent="static", **overrides)
    )


def test_a_kept_answer_is_given_again_not_run_again(instance: Any) -> None:
    first = instance(agent="static")
    with Client(first.target) as client:
        sid = client.create_session().id
        command = {"command": "echo once >> /workspace/n; cd /tmp; echo $RANDOM"}
        answered = client.call(sid, "shell", command, call_id="a")
    restarts.crash(first)
    second = instance(agent="static")
    with Client(second.target) as client:
        again = client.call(sid, "shell", command, call_id="a")
        assert again.output == answered.output
        count = client.call(sid, "shell", {"command": "wc -l < /workspace/n; pwd"})
        assert count.output["stdout"].split() == ["1", "/workspace"]
        assert client.close_session(sid) == "closed"
