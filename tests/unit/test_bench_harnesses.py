"""bench/harnesses.py: each harness's rows, or why they are empty."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import harnesses


def test_without_the_integrations_venv_the_rows_say_why_and_no_daemon_is_called(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(harnesses, "PYTHON", tmp_path / "bin" / "python")
    daemon: Any = None  # never touched
    rows = harnesses.measure(daemon, quick=True)
    assert set(rows) == set(harnesses.ROWS)
    assert all(sample.n == 0 for sample in rows.values())
    assert rows["agents_toolrt"].note.startswith("no .venv-integrations")
    assert "Docker Compose >= 2.21" in rows["inspect_docker"].note
