"""Whether the host can take one more session (beyond the session count)."""

from __future__ import annotations

from collections.abc import Callable

import psutil

from runtime.config import Config, MiB
from runtime.errors import AdmissionRefused


def available_memory() -> int:
    """Bytes the host can give new processes without swapping (psutil)."""
    return int(psutil.virtual_memory().available)


def check_memory(config: Config, available: Callable[[], int] = available_memory) -> None:
    """RESOURCE_EXHAUSTED while available memory is below the configured floor."""
    floor = config.min_available_memory_bytes
    if not floor:
        return
    free = available()
    if free < floor:
        msg = (
            f"the host has {free / MiB:.0f} MiB of memory available, below the "
            f"configured floor of {floor / MiB:.0f} MiB (min_available_memory_bytes); "
            "close sessions or retry later"
        )
        raise AdmissionRefused(msg)
