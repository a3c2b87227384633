"""A call's arguments read once, and one tenant's large ones one at a time.

Each call's `arguments_json` is measured and parsed once here; the journal's
fingerprint and the tool's validation both start from that parse.

Parsing holds the GIL: `json.loads` of 4 MiB takes tens of milliseconds
during which no other RPC of any tenant is served, even on a worker thread.
So large arguments (past `cpu.INLINE_BYTES`, the size that goes to a worker
thread) take turns within their tenant: one tenant's large parses run one at
a time, the next ones wait in arrival order, and past `shares.large_arguments_waiting`
waiting calls the tenant's next one is refused (RESOURCE_EXHAUSTED, before
the journal sees it: a retry with the same id runs). A tenant flooding the
daemon with large arguments then delays its own calls, while every other
tenant competes with at most one such parse per flooding tenant, and keeps a
worker thread for its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from runtime import cpu
from runtime.errors import AdmissionRefused
from runtime.models import ToolCall
from runtime.sessions.journal import fingerprint
from runtime.sessions.shares import Share
from runtime.tools.base import Tool
from runtime.tools.registry import Registry
from runtime.tools.validation import Arguments, read_arguments

T = TypeVar("T")

# The `share` label of refusals in toolrt_share_refusals_total.
SHARE = "argument_parses"


class ArgumentReader:
    """Parse, fingerprint and validate calls' arguments, large ones in turn."""

    def __init__(
        self,
        registry: Registry,
        max_bytes: int,
        max_waiting: int,
        refused: Callable[[str], None] = lambda share: None,
    ) -> None:
        self._registry = registry
        self._max_bytes = max_bytes
        self._max_waiting = max_waiting
        self._refused = refused
        self._turns = Share(1)

    async def read(self, tenant: str, call: ToolCall) -> tuple[Arguments, str]:
        """The call's arguments, parsed once, and its idempotency fingerprint."""
        return await self._work(tenant, len(call.arguments_json), self._read, call)

    async def validate(
        self, tenant: str, name: str, arguments: Arguments
    ) -> tuple[Tool[Any], BaseModel]:
        """The tool and its validated arguments (InvalidArguments otherwise)."""
        size = len(arguments.text)
        return await self._work(tenant, size, self._registry.validate, name, arguments)

    def _read(self, call: ToolCall) -> tuple[Arguments, str]:
        arguments = read_arguments(call.arguments_json, self._max_bytes)
        return arguments, fingerprint(call, arguments)

    async def _work(self, tenant: str, size: int, fn: Callable[..., T], *args: Any) -> T:
        if size <= cpu.INLINE_BYTES:
            return fn(*args)
        async with self._turn(tenant):
            return await cpu.compute(size, fn, *args)

    @contextlib.asynccontextmanager
    async def _turn(self, tenant: str) -> AsyncIterator[None]:
        users = self._turns.users(tenant)
        if users > self._max_waiting:
            self._refused(SHARE)
            msg = (
                f"this tenant already has {users} calls with large arguments being "
                f"parsed or waiting (shares.large_arguments_waiting = {self._max_waiting}); "
                "retry when they are answered"
            )
            raise AdmissionRefused(msg)
        async with self._turns.hold(tenant):
            yield
