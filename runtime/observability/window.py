"""Events per second over a sliding window: the pool's demand, the status's call rate."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class PerSecond:
    """Counts of events in whole seconds, kept for the last `window_s` seconds."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._window = window_s
        self._clock = clock
        # [second, events in it], oldest first.
        self._seconds: deque[list[int]] = deque()

    def note(self, events: int = 1) -> None:
        second = int(self._clock())
        if self._seconds and self._seconds[-1][0] == second:
            self._seconds[-1][1] += events
        else:
            self._seconds.append([second, events])
        self._trim()

    def _trim(self) -> None:
        oldest = self._clock() - self._window
        while self._seconds and self._seconds[0][0] + 1 <= oldest:
            self._seconds.popleft()

    def peak(self) -> int:
        """Events in the busiest second of the window (0 when there were none)."""
        self._trim()
        return max((count for _, count in self._seconds), default=0)

    def rate(self) -> float:
        """Events per second over the window."""
        self._trim()
        return sum(count for _, count in self._seconds) / self._window
