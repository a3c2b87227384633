"""`toolrt tokens create|list|revoke`: the daemon's bearer tokens, edited in its tokens file.

The file is `--tokens-file`, else `auth.tokens_file` of the configuration
(`--config`, `TOOLRT_CONFIG`, `TOOLRT_AUTH__TOKENS_FILE`). A running daemon
sees every change within seconds. `create` prints the token once, on the last
line of its output; the file keeps only its hash.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from runtime.auth.tokens import create_token, read_records, revoke_token
from runtime.cli.options import add_verb_group
from runtime.config import load_config


def _tokens_file(args: argparse.Namespace) -> str:
    if args.tokens_file:
        return str(args.tokens_file)
    path = load_config(args.config).auth.tokens_file
    if not path:
        msg = "toolrt tokens: no tokens file: pass --tokens-file or set auth.tokens_file"
        raise SystemExit(msg)
    return path


def _tokens(args: argparse.Namespace) -> int:
    path = _tokens_file(args)
    if args.action == "create":
        try:
            record, token = create_token(path, args.tenant, admin=args.admin)
        except ValueError as exc:
            print(f"toolrt tokens: --tenant {exc}", file=sys.stderr)
            return 2
        kind = "admin token" if record.admin else "token"
        print(f"{kind} {record.id} for tenant {record.tenant} in {path} (shown once, keep it):")
        print(token)
    elif args.action == "list":
        for record in read_records(path):
            print(record.line())
    elif not revoke_token(path, args.id):
        print(f"toolrt tokens: no token {args.id!r} in {path}", file=sys.stderr)
        return 1
    else:
        print(f"revoked {args.id}")
    return 0


def add_commands(sub: Any) -> None:
    """Register `tokens` and its actions on the `toolrt` subcommand parser."""
    helps = {
        "create": "a new token for a tenant; prints it once (its last line)",
        "list": "one token a line: id, tenant, created (never the token)",
        "revoke": "remove a token by id (a running daemon refuses it within 5 s)",
    }
    verbs = add_verb_group(sub, "tokens", "create, list or revoke the daemon's tokens", helps)
    for action, p in verbs:
        p.add_argument("--tokens-file", help="the tokens file (default: auth.tokens_file)")
        p.add_argument("--config", help="TOML config naming auth.tokens_file (also TOOLRT_CONFIG)")
        if action == "create":
            p.add_argument("--tenant", required=True, help="the tenant the token acts for")
            p.add_argument(
                "--admin",
                action="store_true",
                help="an admin token: the Admin* RPCs, every tenant; it cannot run tools",
            )
        if action == "revoke":
            p.add_argument("id", help="the token's id (first column of `tokens list`)")
        p.set_defaults(func=_tokens)
