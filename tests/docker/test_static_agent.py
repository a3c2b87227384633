"""The static agent (`agent = "static"`, static-agent/ in Go) in real sandboxes:
on the default image, and on a BusyBox-only image without Python, built here
offline from Debian's busybox-static (`make go` installs it)."""

from __future__ import annotations

import io
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.client import Client
from runtime.sandbox.agent_dir import HELPER, STATIC_AGENT
from tests.docker import test_restarts as restarts
from tests.docker import test_secret_edges as secret_edges
from tests.docker import test_secrets as secrets_tests
from tests.helpers import run_check, user_processes

pytestmark = [pytest.mark.docker, pytest.mark.static_agent]

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
        # directory and its exports as bash does.
        assert session.shell("echo ${BASH_VERSION-not bash}").output["stdout"] == "not bash\n"
        assert session.shell("mkdir -p /workspace/sub && cd /workspace/sub").ok
        assert session.shell("pwd").output["stdout"] == "/workspace/sub\n"
        exported = session.shell(
            'export K=v Q="it\'s \\"quoted\\"\nover two lines"; L=local; exit 4',
            persist_env=True,
        )
        assert exported.output["exit_code"] == 4 and not exported.output.get("note"), exported
        kept = session.shell('echo $K; echo "$Q"; echo ${L-unset}; pwd').output["stdout"]
        assert kept == 'v\nit\'s "quoted"\nover two lines\nunset\n/workspace/sub\n', kept
        unexported = session.shell("unset K; export -n Q 2>/dev/null || unset Q", persist_env=True)
        assert unexported.ok, unexported
        assert session.shell("echo ${K-gone} ${Q-gone}").output["stdout"] == "gone gone\n"
        started = session.shell("echo up; sleep 1; echo done; exit 5", background=True)
        assert started.output["stdout"] == "up\n", started
        done = session.call(
            "process_output", {"process_id": started.output["process_id"], "timeout_s": 30}
        )
        assert (done.output["state"], done.output["exit_code"]) == ("exited", 5), done
        assert done.output["output"] == "done\n"
        # Programs and paths too: the launcher is static, no python3 needed.
        ran = session.exec(["cat"], stdin=b"\x00any image\xff")
        assert (ran.exit_code, ran.stdout) == (0, b"\x00any image\xff")
        session.write_file_bytes("/tmp/p/b.bin", b"\x00\x01", make_parents=True, mode=0o600)
        assert session.read_file_bytes("/tmp/p/b.bin") == b"\x00\x01"
        assert session.stat("/tmp/p/b.bin").mode == 0o600
        # A tool whose program the image lacks says what is missing.
        tests = session.call("run_tests", {})
        assert tests.error_code == "NOT_FOUND", tests
        assert "no python3 on its PATH" in tests.error_message
        assert "python3: not found" in tests.output["output"]


def test_the_python_tool_says_why_it_cannot_run(static_client: Any, busybox_image: str) -> None:
    # The static agent starts the interpreter (test_static_agent_programs);
    # an image without python3 is told so.
    with static_client.session(image=busybox_image) as session:
        missing = session.call("python", {"code": "1+1"})
        assert missing.error_code == "NOT_FOUND", missing
        assert "image has no python3" in missing.error_message
        assert session.shell("echo still serving").output["stdout"] == "still serving\n"


def test_stop_leftovers_spares_running_calls_and_live_handles(
    make_daemon: Any, docker_client: Any
) -> None:
    # What a restore does first: whatever earlier calls left running goes,
    # the background processes (stopped by handle afterwards) stay.
    daemon = make_daemon(agent="static")
    with Client(daemon.target) as client, client.session() as session:
        kept = session.shell("sleep 703", background=True).output["process_id"]
        left = session.shell(
            "nohup sleep 701 >/dev/null 2>&1 & setsid sh -c 'sleep 702' >/dev/null 2>&1 &"
        )
        assert left.ok, left
        agent = daemon.daemon.core.manager.get("default", session.id).sandbox.agent
        assert daemon.run(agent.stop_leftovers()) >= 2
        running = user_processes(docker_client, session.id)
        assert any("sleep 703" in p for p in running), running
        assert not any("sleep 701" in p or "sleep 702" in p for p in running), running
        listed = session.call("process_list", {}).output["processes"]
        assert [(p["process_id"], p["state"]) for p in listed] == [(kept, "running")]


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
        assert count.output["stdout"].split() == ["1", "/tmp"]
        assert client.close_session(sid) == "closed"


# The Python agent's secrets checks, run on the static agent unchanged, each
# with its module's secrets: (module, check names, the secrets file, the
# tenant's secrets, the session's).
SECRET_CHECKS = [
    (
        secrets_tests,
        (
            "commands_get_the_secret_and_its_output_is_redacted",
            "base64_forms_are_redacted_at_every_alignment",
            "reversed_and_hex_forms_are_not_caught",
            "a_secret_straddling_the_head_and_tail_cuts_never_leaks_a_part",
            "a_secret_split_across_two_streamed_chunks_is_caught",
            "read_file_is_redacted_and_edit_file_keeps_the_value",
            "background_output_is_redacted",
            "text_files_in_downloads_are_redacted_with_true_sizes",
            "persisted_exports_keep_a_reference_not_the_value",
            "an_encoded_secret_is_not_persisted",
        ),
        f"GITHUB_TOKEN={secrets_tests.TOKEN}\n",
        ["GITHUB_TOKEN"],
    ),
    (
        secret_edges,
        (
            "run_tests_redacts_what_parsing_the_report_unescapes",
            "colour_codes_splitting_a_secret_do_not_join_it_again",
            "toolrts_cuts_leave_no_piece_of_a_secret",
            "a_download_is_the_files_as_they_are_but_text_redacted",
        ),
        f"API_KEY={secret_edges.KEY}\nPW={secret_edges.PW}\nHOST_KEY={secret_edges.HOST_KEY}\n",
        ["API_KEY", "PW"],
    ),
]


@pytest.mark.parametrize(
    ("module", "name", "secrets", "names"),
    [
        (module, name, text, names)
        for module, checks, text, names in SECRET_CHECKS
        for name in checks
    ],
    ids=[name for _, checks, _, _ in SECRET_CHECKS for name in checks],
)
def test_static_agent_passes_the_python_agents_secret_checks(
    make_daemon: Any, tmp_path: Path, module: Any, name: str, secrets: str, names: list[str]
) -> None:
    run_secret_check(make_daemon, tmp_path, getattr(module, f"test_{name}"), secrets, names)


def test_a_snapshot_is_taken_and_one_holding_a_value_refused(
    make_daemon: Any, tmp_path: Path
) -> None:
    _, _, secrets, names = SECRET_CHECKS[1]
    check = secret_edges.test_a_snapshot_holding_a_value_is_refused_naming_the_path
    setup = 'printf "key=%s\\n" "$API_KEY" > conf.txt'
    run_secret_check(
        make_daemon, tmp_path, check, secrets, names, setup=setup, path="/workspace/conf.txt"
    )


def run_secret_check(
    make_daemon: Any, tmp_path: Path, check: Any, secrets: str, names: list[str], **given: Any
) -> None:
    """`check` against a static agent's session with `names` of `secrets`."""
    path = tmp_path / "secrets.env"
    path.write_text(secrets)
    path.chmod(0o600)
    tenant_names = [line.split("=")[0] for line in secrets.splitlines()]
    daemon = make_daemon(
        agent="static",
        secrets_file=str(path),
        tenants={"default": {"secrets": tenant_names}},
    )
    with Client(daemon.target) as client, client.session(secrets=names) as session:
        run_check(check, client=client, session=session, daemon=daemon, **given)
