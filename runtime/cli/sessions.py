"""`toolrt sessions create|list|get|close`: sessions from a terminal."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from runtime.cli.options import (
    add_client_options,
    add_session_options,
    add_verb_group,
    connect,
    session_fields,
)


def when(unix: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix)) if unix else "-"


def session_line(session: Any) -> str:
    """One line of `sessions list`: id, state, owner, image, calls, created, expires."""
    return "\t".join(
        [
            session.id,
            session.state,
            f"tenant={session.tenant}",
            session.image,
            f"calls={session.calls}",
            f"created={when(session.created_at)}",
            f"expires={when(session.expires_at)}",
        ]
    )


def session_json(session: Any) -> str:
    """`sessions get`: every field of the Session message, as JSON."""
    from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]

    data = MessageToDict(session, preserving_proto_field_name=True)
    return json.dumps(data, indent=2, sort_keys=True)


def _sessions(args: argparse.Namespace) -> int:
    with connect(args) as client:
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
    helps = {
        "create": "start a session; prints its id",
        "list": "your open sessions: id, state, owner, image, calls, created, expires",
        "get": "one session, as JSON",
        "close": "close a session (its container is removed)",
    }
    verbs = add_verb_group(sub, "sessions", "create, list, get or close sessions", helps)
    for action, p in verbs:
        add_client_options(p)
        if action in ("get", "close"):
            p.add_argument("session_id")
        if action == "create":
            add_session_options(p)
        p.set_defaults(func=_sessions)
