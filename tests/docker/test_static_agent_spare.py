"""The Python agent's checks of the spare shell (tests/docker/test_spare_shell.py)
run unchanged on the static agent (`agent = "static"`): calls use a shell
started while the session was idle, and nothing another process of the
sandbox user does to a waiting spare reaches a call's answer. Under a shell
that is not bash (a BusyBox-only image) no spare starts."""

from __future__ import annotations

import time
from typing import Any

import pytest

from runtime.client import Client
from tests.docker import test_spare_shell as spare_shell
from tests.docker import test_static_agent as static_agent
from tests.helpers import run_check

pytestmark = [pytest.mark.docker, pytest.mark.static_agent]

CHECKS = [
    spare_shell.test_the_spare_keeps_what_the_session_carries,
    spare_shell.test_a_call_in_a_spare_holds_no_descriptor_of_the_spares_own,
    spare_shell.test_a_leftover_cannot_put_words_in_a_waiting_spares_mouth,
    spare_shell.test_a_spare_killed_while_it_waits_costs_the_next_call_nothing,
    spare_shell.test_a_one_call_environment_never_reaches_another_call_through_a_spare,
]
# The BusyBox-only image, built offline: the static agent module's fixture.
busybox_image = static_agent.busybox_image
# Whether this call's shell was a spare: its boot line names __toolrt_g
# (which this line, a shell's `-c` when it is not, does not spell out).
# With the shell's builtins and cat alone.
IN_A_SPARE = 'case "$(cat /proc/$$/cmdline)" in *__toolrt_[g]*) echo spare;; *) echo own;; esac'


@pytest.fixture
def daemon(make_daemon: Any) -> Any:
    """The checks' daemon (their `client`'s and `session`'s): a static one."""
    return make_daemon(agent="static")


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__[5:])
def test_static_agent_passes_the_python_agents_spare_checks(
    client: Any, session: Any, check: Any
) -> None:
    run_check(check, client=client, session=session)


@pytest.mark.parametrize("spare", [True, False], ids=["spare", "no-spare"])
def test_static_agent_runs_a_call_after_an_idle_spell_in_a_spare(
    make_daemon: Any, spare: bool
) -> None:
    def make_static(**overrides: Any) -> Any:
        return make_daemon(agent="static", **overrides)

    run_check(
        spare_shell.test_a_call_after_an_idle_spell_runs_in_a_shell_started_before_it,
        make_daemon=make_static,
        spare=spare,
    )


def shell_after_a_pause(client: Client, session: Any, image: str) -> str:
    assert spare_shell.shell(client, session, "true").ok
    time.sleep(1.5)  # the session is idle: its next shell may start now
    seen = spare_shell.shell(client, session, IN_A_SPARE)
    assert seen.ok and seen.output["exit_code"] == 0, (image, seen)
    return str(seen.output["stdout"])


def test_a_spare_serves_under_bash_and_none_starts_under_busybox_sh(
    make_daemon: Any, busybox_image: str
) -> None:
    daemon = make_daemon(agent="static")
    with Client(daemon.target) as client:
        with client.session() as session:
            assert shell_after_a_pause(client, session, "default") == "spare\n"
        with client.session(image=busybox_image) as session:
            assert shell_after_a_pause(client, session, busybox_image) == "own\n"


# Sleeps that leave the sandbox six pids short of its limit (the agent
# wants eight free before it starts a spare); cgroup v1 or v2.
FILL_PIDS = (
    "c=/sys/fs/cgroup/pids; [ -d $c ] || c=/sys/fs/cgroup; "
    "n=$(( $(cat $c/pids.max) - $(cat $c/pids.current) - 6 )); "
    "for ((i = 0; i < n; i++)); do sleep 600 & done; echo $n"
)


@pytest.mark.runc_only("gVisor shows the sandbox no cgroup files: room is assumed there")
def test_no_spare_starts_while_the_pids_limit_is_nearly_full(make_daemon: Any) -> None:
    daemon = make_daemon(agent="static")
    with Client(daemon.target) as client, client.session(limits={"pids": 64}) as session:
        assert shell_after_a_pause(client, session, "default") == "spare\n"
        filler = spare_shell.shell(client, session, FILL_PIDS, background=True)
        assert filler.ok, filler
        assert shell_after_a_pause(client, session, "default") == "own\n"
        handle = filler.output["process_id"]
        assert client.call(session.id, "process_kill", {"process_id": handle}).ok
        assert shell_after_a_pause(client, session, "default") == "spare\n"


def test_stop_leftovers_drops_the_waiting_spare_without_counting_it(make_daemon: Any) -> None:
    # What a restore does first: the spare is toolrt's own, not a leftover.
    daemon = make_daemon(agent="static")
    with Client(daemon.target) as client, client.session() as session:
        assert shell_after_a_pause(client, session, "default") == "spare\n"
        time.sleep(1.5)  # the next call's spare waits
        agent = daemon.daemon.core.manager.get("default", session.id).sandbox.agent
        assert daemon.run(agent.stop_leftovers()) == 0
        assert shell_after_a_pause(client, session, "default") == "spare\n"
