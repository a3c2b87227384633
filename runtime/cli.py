"""`toolrt` (also `python -m runtime`): run the daemon or drive it."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from typing import Any

from runtime import cli_run, cli_sessions
from runtime.cli_options import add_serve_flags, serve_overrides
from runtime.config import load_config


def _serve(args: argparse.Namespace) -> int:
    from runtime.server.app import serve

    overrides: dict[str, Any] = {
        "listen": args.listen,
        "unix_socket": args.unix_socket,
        "instance": args.instance,
        "image": args.image,
    }
    overrides.update(serve_overrides(args))
    config = load_config(args.config, overrides)
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(serve(config))
    return 0


def _client(args: argparse.Namespace) -> Any:
    from runtime.client import Client

    return Client(args.target)


def _call(args: argparse.Namespace) -> int:
    with _client(args) as client:
        result = client.call(args.session_id, args.tool, args.arguments)
    print(
        json.dumps(
            {
                "ok": result.ok,
                "output": result.output,
                "error": {"code": result.error_code, "message": result.error_message}
                if not result.ok
                else None,
            },
            indent=2,
        )
    )
    return 0 if result.ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toolrt", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the daemon in the foreground")
    serve.add_argument("--config", help="TOML config file (also TOOLRT_CONFIG)")
    serve.add_argument("--listen", help="TCP address, e.g. 127.0.0.1:50051")
    serve.add_argument("--unix-socket", dest="unix_socket", help="also serve on this unix socket")
    serve.add_argument("--instance", help="this daemon's name in container labels")
    serve.add_argument("--image", help="default sandbox image")
    add_serve_flags(serve)
    serve.set_defaults(func=_serve)

    def client_parser(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--target", default="127.0.0.1:50051", help="daemon address")
        return p

    cli_sessions.add_commands(sub)

    call = client_parser("call", "run one tool call: toolrt call SESSION TOOL JSON")
    call.add_argument("session_id")
    call.add_argument("tool")
    call.add_argument("arguments")
    call.set_defaults(func=_call)

    cli_run.add_commands(sub, client_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from runtime.client import ToolrtRpcError

    try:
        return int(args.func(args))
    except ToolrtRpcError as exc:
        print(f"toolrt: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
