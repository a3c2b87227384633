"""The tool catalog: lookup by name, argument validation, neutral export."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from runtime.errors import UnknownTool
from runtime.tools.base import Tool
from runtime.tools.files import EDIT_FILE, LIST_FILES, READ_FILE, WRITE_FILE
from runtime.tools.network import for_session
from runtime.tools.processes import PROCESS_INPUT, PROCESS_KILL, PROCESS_LIST, PROCESS_OUTPUT
from runtime.tools.python import PYTHON
from runtime.tools.run_tests import RUN_TESTS
from runtime.tools.shell import SHELL
from runtime.tools.validation import Arguments, read_arguments, validate


class Registry:
    def __init__(self, tools: Iterable[Tool[Any]]) -> None:
        self._tools = {tool.name: tool for tool in tools}

    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool[Any]:
        tool = self._tools.get(name)
        if tool is None:
            shown = name if len(name) <= 64 else name[:61] + "..."
            msg = f"unknown tool {shown!r}; available tools: {', '.join(self._tools)}"
            raise UnknownTool(msg)
        return tool

    def parse(self, name: str, arguments_json: str) -> tuple[Tool[Any], BaseModel]:
        """The tool and its validated arguments (InvalidArguments otherwise)."""
        return self.validate(name, read_arguments(arguments_json))

    def validate(self, name: str, arguments: Arguments) -> tuple[Tool[Any], BaseModel]:
        """`parse` of arguments already read (the call path reads them once)."""
        tool = self.get(name)
        return tool, validate(name, tool.arguments, arguments)

    def catalog(self, network: list[str] | None = None) -> list[dict[str, Any]]:
        """The neutral catalog: [{name, description, parameters}]; with a
        session's `network` patterns, descriptions say which hosts it reaches."""
        return [
            {
                "name": t.name,
                "description": for_session(t.description, network or []),
                "parameters": t.schema(),
            }
            for t in self._tools.values()
        ]


# The tools of this folder; the composition root (`core.default_registry`)
# adds those of the layers above (`workspace_diff`, which compares snapshots).
TOOLS: tuple[Tool[Any], ...] = (
    SHELL,
    READ_FILE,
    WRITE_FILE,
    EDIT_FILE,
    LIST_FILES,
    RUN_TESTS,
    PROCESS_LIST,
    PROCESS_OUTPUT,
    PROCESS_INPUT,
    PROCESS_KILL,
    PYTHON,
)
