"""read_file's line window against a plain reference, across chunk edges."""

from __future__ import annotations

import io
import random

import pytest

from runtime.agent import files


def reference(data: bytes, first: int, limit: int, max_bytes: int) -> tuple[int, bool, bytes]:
    lines = data.splitlines(keepends=True)
    window = b"".join(lines[first - 1 : first - 1 + limit])
    kept = window[:max_bytes]
    truncated = len(lines) > first - 1 + limit or len(kept) < len(window)
    return len(lines), truncated, kept


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 1 << 20])
def test_line_window_matches_the_reference(monkeypatch, chunk):
    monkeypatch.setattr(files, "WINDOW_CHUNK", chunk)
    rng = random.Random(chunk)
    for _ in range(300):
        data = b"".join(
            b"x" * rng.choice([0, 1, 2, 5, 40]) + rng.choice([b"\n", b"\n", b""])
            for _ in range(rng.randint(0, 30))
        )
        first, limit = rng.randint(1, 12), rng.randint(1, 12)
        max_bytes = rng.choice([0, 3, 10, 1000])
        got = files._line_window(io.BytesIO(data), first, limit, max_bytes)
        assert got == reference(data, first, limit, max_bytes), (data, first, limit, max_bytes)
