"""mini-swe-agent: an environment whose commands run in a toolrt session.

mini-swe-agent has no registry: name the class in a config's `environment`
section (`environment_class: runtime.integrations.minisweagent.ToolrtEnvironment`)
or build it yourself; with no arguments it opens a session on the daemon the
`TOOLRT_*` variables name. Every command runs in a fresh shell in `cwd`, stdout
and stderr merged, like mini-swe-agent's own `docker` environment; a command
over its timeout comes back as that environment's timeouts do (`returncode`
-1, `exception_info`), and a session that cannot run anything any more (closed,
expired, sandbox lost) raises `SandboxGone`, which ends the agent's run.
"""

from __future__ import annotations

from typing import Any

# The lint venv has no harness packages; where it has them, they are checked.
from minisweagent.exceptions import Submitted  # type: ignore[import-not-found,unused-ignore]
from minisweagent.utils.serialize import (  # type: ignore[import-not-found,unused-ignore]
    recursive_merge,
)
from pydantic import BaseModel

from runtime.client import Client
from runtime.constants import WORKSPACE
from runtime.integrations import commands
from runtime.integrations.connection import (
    SandboxGone,
    attach_session,
    client_from_env,
    close_quietly,
    open_session,
)

HARNESS = "mini-swe-agent"
# The first output line of a command with which the model says it is done.
SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
UNAME_FIELDS = {"system": "-s", "node": "-n", "release": "-r", "version": "-v", "machine": "-m"}

__all__ = ["SandboxGone", "ToolrtEnvironment", "ToolrtEnvironmentConfig"]


class ToolrtEnvironmentConfig(BaseModel):
    image: str = ""
    """Sandbox image of a new session ("" = the daemon's default)."""
    session_id: str = ""
    """Run in this open session instead of a new one (it is then left open)."""
    cwd: str = WORKSPACE
    """Directory every command starts in."""
    env: dict[str, str] = {}
    """Environment variables of every command."""
    timeout: int = 30
    """Seconds before a command and everything it started are killed."""


class ToolrtEnvironment:
    """mini-swe-agent's `Environment` protocol over a toolrt session."""

    def __init__(
        self,
        *,
        config_class: type[ToolrtEnvironmentConfig] = ToolrtEnvironmentConfig,
        client: Client | None = None,
        **kwargs: Any,
    ) -> None:
        self.config = config_class(**kwargs)
        self._client = client or client_from_env()
        self._owns_session = not self.config.session_id
        if self._owns_session:
            self.session = open_session(self._client, HARNESS, image=self.config.image)
        else:
            self.session = attach_session(self._client, self.config.session_id)
        self._uname: dict[str, str] | None = None

    def execute(
        self, action: dict[str, Any], cwd: str = "", *, timeout: int | None = None
    ) -> dict[str, Any]:
        """Run `action["command"]`; {"output", "returncode", "exception_info"}."""
        limit = timeout or self.config.timeout
        try:
            outcome = commands.run(
                self.session,
                str(action.get("command", "")),
                cwd=cwd or self.config.cwd,
                timeout_s=limit,
                env=self.config.env,
            )
        except (KeyboardInterrupt, SystemExit):
            # A cancelled run stops here: what it started goes with it.
            self.cleanup()
            raise
        output: dict[str, Any] = {
            "output": outcome.output,
            "returncode": outcome.exit_code if outcome.exit_code is not None else -1,
            "exception_info": "",
        }
        if outcome.timed_out:
            output.update(
                returncode=-1,
                exception_info=f"The command timed out after {limit} seconds and was killed.",
                extra={"exception_type": "TimeoutExpired", "exception": outcome.failure},
            )
        elif outcome.failure:
            output.update(
                returncode=-1,
                exception_info=f"An error occurred while executing the command: {outcome.failure}",
                extra={"exception_type": "ToolFailure", "exception": outcome.failure},
            )
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict[str, Any]) -> None:
        """Raise mini-swe-agent's `Submitted` when the command said the task is done."""
        lines = output["output"].lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_MARKER and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise Submitted(
                {
                    "role": "exit",
                    "content": submission,
                    "extra": {"exit_status": "Submitted", "submission": submission},
                }
            )

    def _sandbox_uname(self) -> dict[str, str]:
        """The sandbox's `uname` fields, asked once (the prompts show them)."""
        if self._uname is None:
            script = "; ".join(f"uname {flag}" for flag in UNAME_FIELDS.values())
            lines = commands.run(self.session, script).output.splitlines()
            self._uname = dict(zip(UNAME_FIELDS, lines, strict=False))
        return self._uname

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        merged: dict[str, Any] = recursive_merge(
            self.config.model_dump(), self._sandbox_uname(), kwargs
        )
        return merged

    def serialize(self) -> dict[str, Any]:
        return {
            "info": {
                "config": {
                    # The session it ran in, so a saved trajectory says where.
                    "environment": {
                        **self.config.model_dump(mode="json"),
                        "session_id": self.session.id,
                    },
                    "environment_type": f"{type(self).__module__}.{type(self).__name__}",
                }
            }
        }

    def cleanup(self) -> None:
        """Close the session this environment opened (one it was given stays open)."""
        if getattr(self, "_owns_session", False):
            close_quietly(self._client, self.session.id)
            self._owns_session = False

    def __enter__(self) -> ToolrtEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def __del__(self) -> None:
        self.cleanup()
