"""What a session's shell remembers between calls: its directory and exports.

The agent reports the shell's final directory (and, with `persist_env`, its
exported environment) after each call that ran to its end; this module
decides what of it the session keeps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.agent import protocol
from runtime.agent.redact import Redactor
from runtime.constants import WORKSPACE
from runtime.tools.interpreter import Interpreter

HOME = WORKSPACE
STATE_KEY = "shell"
# workspace_diff's "start" in a stored record.
START_KEY = "start"
# Variables that make every later shell run code or change its options before
# the command: an export of them is for its own call, never kept.
STARTUP_VARS = frozenset({"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "BASH_XTRACEFD", "PS4"})
EXPORTED_FUNCTION = "BASH_FUNC_"


def runs_at_shell_start(name: str) -> bool:
    return name in STARTUP_VARS or name.startswith(EXPORTED_FUNCTION)


@dataclass
class ShellState:
    cwd: str = HOME
    # Exports made with persist_env, and variables it unset.
    env_set: dict[str, str] = field(default_factory=dict)
    env_unset: set[str] = field(default_factory=set)

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        env = {k: v for k, v in base.items() if k not in self.env_unset}
        env.update(self.env_set)
        return env

    def record(
        self,
        report: protocol.ShellReport,
        sent_env: dict[str, str],
        persist_env: bool,
        redactor: Redactor | None = None,
    ) -> str | None:
        """Keep what a finished call left behind; a note for the model, if any.

        The directory is kept wherever the command ended (anywhere the
        sandbox user may enter: the allowlist governs the file tools, not
        where a command runs, which could `cd` anywhere), but only if its
        name holds no secret value: a kept directory is stored state (the
        sessions table, snapshots), and a name there is never rewritten.
        """
        note = None
        cwd = report.cwd
        if cwd:
            if redactor is not None and redactor.found_text(cwd):
                note = (
                    f"the command ended in {redactor.redact_text(cwd)}, whose name holds a "
                    f"secret value; it is not kept, the next call starts in {self.cwd}"
                )
            elif cwd.startswith("/"):
                self.cwd = cwd
        env = report.env
        refused: list[str] = []
        if persist_env and env is not None:
            for key, value in env.items():
                if sent_env.get(key) == value:
                    continue
                if runs_at_shell_start(key):
                    refused.append(key)
                    continue
                self.env_set[key] = str(value)
                self.env_unset.discard(key)
            for key in sent_env:
                if key not in env:
                    self.env_unset.add(key)
                    self.env_set.pop(key, None)
        if refused:
            names = ", ".join(
                f"function {k[len(EXPORTED_FUNCTION) :].removesuffix('%%')}"
                if k.startswith(EXPORTED_FUNCTION)
                else k
                for k in sorted(refused)
            )
            kept = (
                f"not kept for later calls: {names} (they would run code or set options "
                "at the start of every later command; pass them with `env` for one call)"
            )
            note = f"{note}; {kept}" if note else kept
        return note


@dataclass
class ToolState:
    """What a session's tools keep between its calls."""

    # The shell's directory and exports (the shell tool's).
    shell: ShellState = field(default_factory=ShellState)
    # workspace_diff's "start": the id of the snapshot of the workspace an
    # archive seeded, "" for an empty one, None when it could not be taken
    # (snapshots.service writes it).
    start_snapshot: str | None = ""
    # Why it could not be taken (when `start_snapshot` is None).
    start_why: str = ""
    # The python tool's interpreter while it runs (never stored: a restored
    # or re-adopted session starts a new one).
    interpreter: Interpreter | None = None
    # Why the last one ended between calls (sys.exit), for the next call to say.
    interpreter_ended: str = ""

    async def stop_interpreter(self) -> None:
        """Stop the python tool's interpreter, if it runs (reset, timeout, restore, close)."""
        interpreter, self.interpreter = self.interpreter, None
        if interpreter is not None:
            await interpreter.stop()


def dump_tool_state(state: ToolState) -> dict[str, object]:
    """A session's tool state as JSON data (what the state database keeps)."""
    shell = state.shell
    return {
        STATE_KEY: {
            "cwd": shell.cwd,
            "env_set": dict(shell.env_set),
            "env_unset": sorted(shell.env_unset),
        },
        START_KEY: {"snapshot": state.start_snapshot, "why": state.start_why},
    }


def load_tool_state(data: dict[str, object]) -> ToolState:
    """`dump_tool_state` undone (a re-adopted session's shell goes on where it was)."""
    state = ToolState()
    shell = data.get(STATE_KEY)
    if isinstance(shell, dict):
        state.shell = ShellState(
            cwd=str(shell.get("cwd") or HOME),
            env_set={str(k): str(v) for k, v in dict(shell.get("env_set") or {}).items()},
            env_unset={str(k) for k in list(shell.get("env_unset") or [])},
        )
    start = data.get(START_KEY)
    if isinstance(start, dict):
        # A record from before the start was kept has none: the start is then
        # unknown, which workspace_diff says, rather than an empty workspace.
        snapshot = start.get("snapshot")
        state.start_snapshot = snapshot if isinstance(snapshot, str) else None
        state.start_why = str(start.get("why") or "")
    elif isinstance(shell, dict):
        state.start_snapshot = None
        state.start_why = "the session was adopted from a daemon that did not keep its start"
    return state
