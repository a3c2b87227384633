"""bench/typescript.py: the TypeScript client's row beside the Python client's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import typescript


def test_without_the_build_the_row_says_why_and_no_daemon_is_called(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(typescript, "RUNNER", tmp_path / "shell-true.js")
    daemon: Any = None  # never touched
    ts, py = typescript.measure(daemon, quick=True)
    assert (ts.n, py.n) == (0, 0)
    assert ts.note.startswith("the SDK is not built: make typescript-bench")


def test_without_node_the_row_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert typescript.unavailable() == "no node on this host"
