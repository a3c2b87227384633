"""The Python agent's checks of users and root for programs and path
operations run unchanged on the static agent (`agent = "static"`): granted
users run programs and files as themselves, root has no capabilities unless
granted (then exactly six), and root can neither reach the agent nor stop
it with a catchable signal.

Not rerun: the daemon's own checks of grants (who may ask for which user:
the agent is never asked), and the fork launcher's (the static agent always
starts programs through the C launcher)."""

from __future__ import annotations

import contextlib
import inspect
from pathlib import Path
from typing import Any

import pytest

from runtime.client import Client
from tests.docker import test_programs_users as users
from tests.helpers import cases_of, run_check, under_gvisor

pytestmark = [pytest.mark.docker, pytest.mark.static_agent]

CHECKS = [
    users.test_granted_users_run_programs_and_files_as_themselves,
    users.test_a_user_not_granted_is_refused_with_a_reason,
    users.test_a_user_the_image_lacks_is_refused_by_the_sandbox_and_a_bare_uid_is_its_own_group,
    users.test_root_without_capabilities_is_root_in_name_only,
    users.test_root_granted_capabilities_gets_exactly_six,
    users.test_a_session_of_a_tenant_granted_capabilities_gives_them_to_root_only_if_asked,
    users.test_root_cannot_read_or_trace_the_agent,
    users.test_signals_from_root_leave_the_agent_answering,
    users.test_the_audit_log_names_the_user,
    # A user adduser made during the session is found in /etc/passwd.
    users.test_a_writable_root_under_runsc_overlay_takes_adduser,
]
CASES = [(check, case) for check in CHECKS for case in cases_of(check)]
# The fixtures of test_programs_users: a client of a daemon whose default
# tenant is granted these.
TENANTS = {"granted": users.ROOT, "capable": users.CAPABLE}


def skipped_under_gvisor(check: Any) -> None:
    """Skip as pytest skips the check itself when it is marked runc_only."""
    for mark in getattr(check, "pytestmark", []):
        if mark.name == "runc_only" and under_gvisor():
            pytest.skip(f"differs under gVisor: {mark.args[0] if mark.args else ''}")


@pytest.mark.parametrize(
    ("check", "case"),
    CASES,
    ids=[f"{check.__name__[5:]}-{n}" for n, (check, _) in enumerate(CASES)],
)
def test_static_agent_passes_the_python_agents_user_checks(
    make_daemon: Any, tmp_path: Path, check: Any, case: dict[str, Any]
) -> None:
    skipped_under_gvisor(check)

    def make_static(**overrides: Any) -> Any:
        return make_daemon(agent="static", **overrides)

    given: dict[str, Any] = {"make_daemon": make_static, "tmp_path": tmp_path, **case}
    with contextlib.ExitStack() as stack:
        for name, grant in TENANTS.items():
            if name in inspect.signature(check).parameters:
                daemon = make_static(tenants={"default": grant})
                given[name] = stack.enter_context(Client(daemon.target))
        run_check(check, **given)
