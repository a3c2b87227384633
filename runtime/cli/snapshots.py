"""`toolrt snapshot|fork|restore|snapshots`: snapshots of sessions from a terminal.

A snapshot keeps files (/workspace, and /tmp with --include-tmp), the
shell's directory and persisted exports; never processes.
"""

from __future__ import annotations

import argparse
from typing import Any

from runtime.cli.options import add_client_options, add_verb_group, connect
from runtime.cli.sessions import when


def snapshot_line(snapshot: Any) -> str:
    """One line of `snapshots ls`: id, session, files, bytes, created, expires, label."""
    return "\t".join(
        [
            snapshot.id,
            f"session={snapshot.session_id}",
            f"files={snapshot.files}",
            f"bytes={snapshot.bytes}",
            f"created={when(snapshot.created_at)}",
            f"expires={when(snapshot.expires_at)}",
            f"label={snapshot.label}",
        ]
    )


def _snapshot(args: argparse.Namespace) -> int:
    with connect(args) as client:
        print(snapshot_line(client.snapshot(args.session_id, args.label, args.include_tmp)))
    return 0


def _fork(args: argparse.Namespace) -> int:
    with connect(args) as client:
        for session in client.fork(args.source, args.count):
            print(session.id)
    return 0


def _restore(args: argparse.Namespace) -> int:
    with connect(args) as client:
        reply = client.restore(args.session_id, args.snapshot_id)
    stopped = ", ".join(reply.stopped_process_ids) or "none"
    others = reply.stopped_other_processes
    print(
        f"{reply.session.id} restored to {args.snapshot_id}; stopped processes: {stopped}"
        + (f" (and {others} other processes commands left running)" if others else "")
    )
    return 0


def _snapshots(args: argparse.Namespace) -> int:
    with connect(args) as client:
        if args.action == "ls":
            for snapshot in client.list_snapshots():
                print(snapshot_line(snapshot))
        else:
            for snapshot_id in args.snapshot_ids:
                client.delete_snapshot(snapshot_id)
                print(f"deleted {snapshot_id}")
    return 0


def add_commands(sub: Any) -> None:
    """Register `snapshot`, `fork`, `restore` and `snapshots ls|rm`."""
    p = sub.add_parser(
        "snapshot", help="snapshot a session's files and shell state (not processes)"
    )
    add_client_options(p)
    p.add_argument("session_id")
    p.add_argument("--label", default="", help="free text shown by `snapshots ls`")
    p.add_argument("--include-tmp", action="store_true", help="keep /tmp too")
    p.set_defaults(func=_snapshot)

    p = sub.add_parser(
        "fork", help="new sessions from a session or a snapshot (snap_...); prints their ids"
    )
    add_client_options(p)
    p.add_argument("source", help="a session id, or a snapshot id (snap_...)")
    p.add_argument("-n", "--count", type=int, default=1, help="how many (1-16; all or none)")
    p.set_defaults(func=_fork)

    p = sub.add_parser(
        "restore", help="roll a session back to a snapshot in place (stops background processes)"
    )
    add_client_options(p)
    p.add_argument("session_id")
    p.add_argument("snapshot_id")
    p.set_defaults(func=_restore)

    helps = {
        "ls": "your snapshots: id, session, files, bytes, created, expires, label",
        "rm": "delete snapshots",
    }
    for action, p in add_verb_group(sub, "snapshots", "list or delete snapshots", helps):
        add_client_options(p)
        if action == "rm":
            p.add_argument("snapshot_ids", nargs="+", metavar="snapshot_id")
        p.set_defaults(func=_snapshots)
