"""The Python agent's checks of terminals run unchanged on the static agent
(`agent = "static"`): programs under a tty (the Exec RPC: size, resize,
prompts, ^C and signals to the foreground, the timeout) and the model's
`shell{background: true, tty: true}` driven with `process_input`, and
`toolrt run -it` / `toolrt exec -it` in tmux. Their gVisor skips
(runc_only) come along, per check and per case."""

from __future__ import annotations

import inspect
import shutil
from typing import Any

import pytest
from _pytest.mark.structures import ParameterSet

from runtime.client import Client
from tests.docker import test_cli_terminal as cli_terminal
from tests.docker import test_process_input as process_input
from tests.docker import test_programs_tty as programs_tty
from tests.helpers import run_check

pytestmark = [pytest.mark.docker, pytest.mark.static_agent]

CHECKS = [
    programs_tty.test_a_tty_is_the_programs_controlling_terminal_with_term_set,
    programs_tty.test_the_tty_is_the_programs_controlling_terminal_in_its_foreground,
    programs_tty.test_stty_size_follows_the_size_and_each_resize,
    programs_tty.test_a_prompt_is_answered_through_stdin,
    programs_tty.test_closing_stdin_ends_a_line_readers_input_as_a_typed_ctrl_d,
    programs_tty.test_an_interrupt_stops_the_foreground_program,
    programs_tty.test_signal_int_reaches_an_interactive_shells_foreground_job,
    programs_tty.test_a_timeout_kills_a_tree_started_under_a_tty,
    process_input.test_a_python_repl_is_driven_across_calls,
    process_input.test_an_interactive_shell_keeps_its_state_across_calls,
    process_input.test_a_prompt_is_answered,
    process_input.test_typing_needs_a_terminal_and_tty_needs_background,
]
# The CLI checks' tmux pane: their fixture, here on the static `daemon` below.
pane = cli_terminal.pane
CLI_CHECKS = [
    cli_terminal.test_run_it_bash_is_a_terminal_of_this_size_resized_with_its_exit_code,
    cli_terminal.test_ctrl_c_in_run_it_interrupts_the_program_in_the_sandbox,
    cli_terminal.test_exec_it_runs_in_an_existing_session,
]


def cases(check: Any) -> list[Any]:
    """The check's cases as pytest params, each with the check's runc_only
    mark and its case's own (one parametrize at most, as these have)."""
    marks = [m for m in getattr(check, "pytestmark", []) if m.name == "runc_only"]
    name = check.__name__[5:]
    for mark in getattr(check, "pytestmark", []):
        if mark.name == "parametrize":
            (arg,) = [n.strip() for n in mark.args[0].split(",")]
            return [
                pytest.param(
                    check,
                    {arg: value.values[0]},
                    marks=[*marks, *value.marks],
                    id=f"{name}-{value.id}",
                )
                for value in mark.args[1]
                if isinstance(value, ParameterSet)
            ]
    return [pytest.param(check, {}, marks=marks, id=name)]


@pytest.mark.parametrize(("check", "case"), [p for check in CHECKS for p in cases(check)])
def test_static_agent_passes_the_python_agents_terminal_checks(
    make_daemon: Any, docker_client: Any, check: Any, case: dict[str, Any]
) -> None:
    daemon = make_daemon(agent="static")
    with Client(daemon.target) as client, client.session() as session:
        run_check(check, session=session, docker_client=docker_client, **case)


@pytest.fixture
def daemon(make_daemon: Any) -> Any:
    """The CLI checks' daemon (and their `client`'s, `pane`'s): a static one."""
    return make_daemon(agent="static")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt: tmux)")
@pytest.mark.parametrize(("check", "case"), [p for check in CLI_CHECKS for p in cases(check)])
def test_static_agent_passes_the_cli_terminal_checks(
    request: pytest.FixtureRequest, check: Any, case: dict[str, Any]
) -> None:
    fixtures = [name for name in inspect.signature(check).parameters if name not in case]
    run_check(check, **{name: request.getfixturevalue(name) for name in fixtures}, **case)
