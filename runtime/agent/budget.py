"""The time a file or archive operation may take, and its cancellation.

Each such operation runs on a thread of its own (file_ops.py) with a Budget
set for that thread; loops that can run long (reading a file line by line,
listing, packing, unpacking) call `check()` between steps, so a 64 GiB
sparse file or a decompression bomb ends in TIMEOUT instead of holding the
agent, and a Cancel from the daemon stops it at the next step.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import threading
import time
from typing import Optional

from .protocol import TIMEOUT


class BudgetExceeded(Exception):
    """The operation outlived its deadline or was cancelled."""

    code = TIMEOUT

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Budget:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.cancelled = threading.Event()

    def check(self, doing: str) -> None:
        if self.cancelled.is_set():
            msg = f"cancelled while {doing}"
            raise BudgetExceeded(msg)
        if time.monotonic() > self.deadline:
            msg = f"gave up after {self.seconds:g} s while {doing}"
            raise BudgetExceeded(msg)


_current = threading.local()


def start(budget: Optional[Budget]) -> None:
    """Set (or clear) the budget of the calling thread."""
    _current.budget = budget


def check(doing: str) -> None:
    """Raise BudgetExceeded when this thread's operation must stop."""
    budget: Optional[Budget] = getattr(_current, "budget", None)
    if budget is not None:
        budget.check(doing)
