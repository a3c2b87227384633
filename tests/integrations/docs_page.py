"""The code blocks of docs/integrations.md, and running one as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"


def blocks(section: str, language: str) -> list[str]:
    """The `language` code blocks of the page's `## section`."""
    text = PAGE.read_text().split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def run_example(code: str, model: Any, capsys: pytest.CaptureFixture[str]) -> str:
    exec(compile(code, str(PAGE), "exec"), {"model": model})
    return capsys.readouterr().out
