"""CPU-bound work off the daemon's event loop.

The loop is for I/O: while it parses 16 MiB of arguments, matches a model's
regular expression against a megabyte of output or reads a report of
300,000 test cases, every other session waits. Such work runs here instead,
on a few worker threads, when its input is large; a small input is handled
inline, where the hop to a thread would cost more than the work.

Threads share the GIL, so the work itself is written to let go of it often
(bounded steps, incremental parsers, `regex` with `concurrent=True`). The
pool has as many workers as there are cores, at most four: more would only
share the same CPUs, and stretch the wall-clock timeouts (a regex's) that
bound each piece of work.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

# Inputs up to this size are handled on the loop (about a millisecond of work).
INLINE_BYTES = 64 << 10

# Threads start on first use; created once per process because the pool is
# sized to the machine, not to a daemon, and holds no state of its own.
_POOL = ThreadPoolExecutor(
    max_workers=max(1, min(4, os.cpu_count() or 1)), thread_name_prefix="toolrt-cpu"
)


async def compute(size: int, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)`: inline when `size` (its input's) is small, else
    on a worker thread while the loop goes on serving."""
    if size <= INLINE_BYTES:
        return fn(*args, **kwargs)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_POOL, functools.partial(fn, *args, **kwargs))
