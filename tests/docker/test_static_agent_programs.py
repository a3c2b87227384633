"""The Python agent's checks of programs (the Exec, ReadFile, WriteFile and
StatPath RPCs) and of the python tool, which starts its interpreter as a
program, run unchanged on the static agent (`agent = "static"`)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from runtime.client import Client
from tests.docker import test_programs_exec as programs
from tests.docker import test_programs_files as program_files
from tests.docker import test_python_tool as python_tool
from tests.helpers import cases_of, run_check

pytestmark = [pytest.mark.docker, pytest.mark.static_agent]

CHECKS = [
    programs.test_64_mib_of_binary_stdin_round_trips_through_sha256sum,
    programs.test_1_mib_of_argv_arrives_whole,
    programs.test_10_mib_of_stdout_arrives_whole,
    programs.test_output_past_the_cap_is_counted_not_sent,
    programs.test_cwd_anywhere_the_user_may_enter_and_env_on_top,
    programs.test_a_signalled_process_says_so,
    programs.test_a_missing_or_unexecutable_program_is_refused_before_it_starts,
    programs.test_a_timeout_kills_the_whole_tree,
    programs.test_a_cancelled_rpc_kills_the_whole_tree,
    programs.test_stdin_signals_and_eof_reach_the_program,
    programs.test_secrets_are_redacted_from_output_and_files,
    programs.test_a_restore_ends_running_execs_and_close_ends_them_too,
    programs.test_a_client_that_does_not_read_holds_the_program_back,
    program_files.test_bytes_round_trip_anywhere_the_user_may_write,
    program_files.test_stat_says_what_is_there,
    program_files.test_every_file_error_has_its_reason,
    program_files.test_a_read_only_file_refuses_write_file_and_keeps_what_it_is,
    program_files.test_special_files_are_read_up_to_the_cap,
    program_files.test_a_fifo_is_read_from_its_writer,
    python_tool.test_state_tables_figures_and_errors,
    python_tool.test_input_eof_exit_reset_and_children,
    python_tool.test_a_runaway_cell_is_interrupted_and_the_state_kept,
    python_tool.test_a_cell_that_ignores_the_interrupt_restarts_the_interpreter,
    python_tool.test_execute_stream_sends_output_as_it_comes,
    python_tool.test_secrets_are_redacted_from_every_text_output,
    python_tool.test_past_the_memory_ceiling_the_interpreter_restarts_and_the_session_lives,
    python_tool.test_restore_stops_the_interpreter,
]
CASES = [(check, case) for check in CHECKS for case in cases_of(check)]


@pytest.mark.parametrize(
    ("check", "case"),
    CASES,
    ids=[f"{check.__module__.rsplit('.', 1)[1][5:]}-{check.__name__[5:]}" for check, _ in CASES],
)
def test_static_agent_passes_the_python_agents_program_checks(
    make_daemon: Any, docker_client: Any, tmp_path: Path, check: Any, case: dict[str, Any]
) -> None:
    def make_static(**overrides: Any) -> Any:
        return make_daemon(agent="static", **overrides)

    daemon = make_static()
    with Client(daemon.target) as client:
        given = {
            "client": client,
            "docker_client": docker_client,
            "make_daemon": make_static,
            "tmp_path": tmp_path,
            **case,
        }
        if "session" not in inspect.signature(check).parameters:
            run_check(check, **given)
            return
        with client.session() as session:
            run_check(check, session=session, **given)
