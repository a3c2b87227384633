"""`toolrt status` and `toolrt top`: the daemon seen by its operator, over the Admin* RPCs.

Both are an admin principal's calls (an admin token, or with authentication
off a loopback or unix-socket caller) and read nothing but the gRPC API, so
they work against any daemon they can reach.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from runtime.cli.options import add_client_options, connect

MiB = 1 << 20


def duration(seconds: float) -> str:
    """3725 → "1h 02m 05s"; 42 → "42s"."""
    seconds = int(max(0, seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h {minutes:02d}m"
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def size(n: int) -> str:
    if n < 0:
        return "-"
    return f"{n / MiB:.0f}M" if n < 1 << 30 else f"{n / (1 << 30):.1f}G"


def tally(counts: Any, order: tuple[str, ...] = ()) -> str:
    """{"pool": 3, "cold": 1} → "pool 3, cold 1" (zeros left out)."""
    keys = [k for k in order if k in counts] + sorted(k for k in counts if k not in order)
    shown = [f"{k} {counts[k]}" for k in keys if counts[k]]
    return ", ".join(shown) or "none"


def status_lines(stats: Any, target: str) -> list[str]:
    """`toolrt status`: one screen."""
    health = "healthy" if stats.healthy else f"UNHEALTHY: {stats.engine_error}"
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stats.started_at))
    live = sum(stats.sessions.values())
    pool = [
        f"{p.image} ({size(p.workspace_bytes)} workspace, {size(p.tmp_bytes)} tmp): "
        f"{p.ready} ready, {p.filling} starting, aiming at {p.target}"
        for p in stats.pool
    ] or ["off"]
    return [
        f"toolrt {stats.version}, instance {stats.instance}, at {target}: {health}",
        f"uptime    {duration(stats.uptime_seconds)} (since {since})",
        f"engine    {stats.engine}",
        f"runtime   {stats.runtime or 'the engine default'}",
        f"sessions  {live} open ({tally(stats.sessions, ('ready', 'closing'))}), "
        f"at most {stats.max_sessions}",
        f"          created {tally(stats.sessions_created, ('pool', 'cold'))}; "
        f"closed {tally(stats.sessions_closed, ('closed', 'idle', 'ttl'))}",
        f"pool      {pool[0]}",
        *(f"          {line}" for line in pool[1:]),
        f"calls     {stats.calls_per_second:.2f}/s over the last minute, "
        f"{stats.calls_total} since start",
        f"errors    {tally(stats.errors)}",
    ]


def _status(args: argparse.Namespace) -> int:
    with connect(args) as client:
        stats = client.admin_stats()
    if args.json:
        from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]

        data = MessageToDict(stats, preserving_proto_field_name=True)
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print("\n".join(status_lines(stats, args.target)))
    return 0 if stats.healthy else 1


class Top:
    """Frames of `toolrt top`: the daemon's summary, then one row per session."""

    def __init__(self, client: Any, tenant: str) -> None:
        self._client = client
        self._tenant = tenant
        # Session id → (monotonic time, cpu seconds) at the previous frame.
        self._cpu: dict[str, tuple[float, float]] = {}

    def frame(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        stats = self._client.admin_stats()
        sessions = self._client.admin_sessions(tenant=self._tenant, usage=True)
        now, wall = time.monotonic(), time.time()
        pool = sum(p.ready for p in stats.pool)
        header = Text(
            f"toolrt {stats.version} {stats.instance}  up {duration(stats.uptime_seconds)}  "
            f"sessions {len(sessions)}/{stats.max_sessions}  warm {pool}  "
            f"calls {stats.calls_per_second:.1f}/s  errors {sum(stats.errors.values())}  "
            + ("" if stats.healthy else f"UNHEALTHY: {stats.engine_error}"),
            style="bold" if stats.healthy else "bold red",
        )
        table = Table(expand=True, box=None, header_style="reverse")
        columns = ("SESSION", "TENANT", "AGE", "CALLS", "CPU%", "MEM", "LAST TOOL", "IDLE", "STATE")
        for column in columns:
            table.add_column(
                column, no_wrap=True, justify="right" if column in "CALLS CPU% MEM" else "left"
            )
        seen: dict[str, tuple[float, float]] = {}
        for view in sessions:
            s = view.session
            cpu = "-"
            if view.cpu_seconds >= 0:
                seen[s.id] = (now, view.cpu_seconds)
                before = self._cpu.get(s.id)
                if before is not None and now > before[0]:
                    cpu = f"{100 * (view.cpu_seconds - before[1]) / (now - before[0]):.1f}"
            idle = "busy" if view.active_calls else duration(wall - view.last_used_at)
            table.add_row(
                s.id[:12],
                s.tenant,
                duration(wall - s.created_at),
                str(s.calls),
                cpu,
                size(view.memory_bytes),
                view.last_tool or "-",
                idle,
                s.state,
            )
        self._cpu = seen
        return Group(header, table)


def _top(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    console = Console()
    with connect(args) as client:
        top = Top(client, args.tenant)
        if args.once:
            console.print(top.frame())
            return 0
        with Live(top.frame(), console=console, auto_refresh=False, screen=False) as live:
            try:
                while True:
                    time.sleep(args.interval)
                    live.update(top.frame(), refresh=True)
            except KeyboardInterrupt:
                return 0
    return 0


def add_commands(sub: Any) -> None:
    status = sub.add_parser(
        "status", help="the daemon's state on one screen; exit 0 when healthy (admin)"
    )
    add_client_options(status)
    status.add_argument("--json", action="store_true", help="every field, as JSON")
    status.set_defaults(func=_status)

    top = sub.add_parser("top", help="live view of every tenant's sessions (admin)")
    add_client_options(top)
    top.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    top.add_argument("--tenant", default="", help="only this tenant's sessions")
    top.add_argument("--once", action="store_true", help="print one frame and exit")
    top.set_defaults(func=_top)
