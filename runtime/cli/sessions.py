"""`toolrt sessions create|list|get|close`: sessions from a terminal."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from runtime.cli.options import add_session_options, session_fields
from runtime.constants import DEFAULT_TARGET


def _when(unix: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix)) if unix else "-"


def session_line(session: Any) -> str:
    """One line of `sessions list`: id, state, image, calls, created, expires."""
    return "\t".join(
        [
            session.id,
            session.state,
            session.image,
            f"calls={session.calls}",
            f"created={_when(session.created_at)}",
            f"expires={_when(session.expires_at)}",
        ]
    )


def session_json(session: Any) -> str:
    """`sessions get`: every field of the Session message, as JSON."""
    from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]

    data = MessageToDict(session, preserving_proto_field_name=True)
    return json.dumps(data, indent=2, sort_keys=True)


def _sessions(args: argparse.Namespace) -> int:
    from runtime.client import Client

    with Client(args.target) as client:
        if args.action == "create":
            print(client.create_session(**session_fields(args)).id)
        elif args.action == "list":
            for session in client.list_sessions():
                print(session_line(session))
        elif args.action == "get":
            print(session_json(client.get_session(args.session_id)))
        else:
            print(client.close_session(args.session_id))
    return 0


def add_commands(sub: Any) -> None:
    """Register `sessions` and its actions on the `toolrt` subcommand parser."""
    sessions = sub.add_parser("sessions", help="create, list, get or close sessions")
    actions = sessions.add_subparsers(dest="action", required=True)
    helps = {
        "create": "start a session; prints its id",
        "list": "the open sessions: id, state, image, calls, created, expires",
        "get": "one session, as JSON",
        "close": "close a session (its container is removed)",
    }
    for action, help_text in helps.items():
        p = actions.add_parser(action, help=help_text)
        p.add_argument("--target", default=DEFAULT_TARGET, help="daemon address")
        if action in ("get", "close"):
            p.add_argument("session_id")
        if action == "create":
            add_session_options(p)
        p.set_defaults(func=_sessions)
