"""`toolrt serve` (the gRPC daemon) and `toolrt mcp` (the MCP front on stdio)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import uuid
from typing import Any

from runtime.cli.options import add_client_options, add_serve_flags, connect, serve_overrides
from runtime.config import load_config
from runtime.errors import ConfigurationError
from runtime.observability.logs import configure_logging


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
    configure_logging(config.log_level, config.log_format)
    try:
        asyncio.run(serve(config))
    except ConfigurationError as exc:
        print(f"toolrt serve: refusing to start: {exc}", file=sys.stderr)
        return 2
    return 0


def _mcp(args: argparse.Namespace) -> int:
    from runtime.fronts.mcp import LocalFront, RemoteFront, ToolFront, serve_mcp

    # stdout carries the protocol: logs go to stderr.
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    front: ToolFront
    if args.target:
        front = RemoteFront(connect(args))
    else:
        overrides = {
            "instance": args.instance or f"toolrt-mcp-{uuid.uuid4().hex[:12]}",
            "image": args.image,
            # One session for the life of the process, made at once: a warm
            # container would only wait beside it.
            "pool_size": 0,
        }
        front = LocalFront(load_config(args.config, overrides))
    asyncio.run(serve_mcp(front))
    return 0


def add_commands(sub: Any) -> None:
    serve = sub.add_parser("serve", help="run the daemon in the foreground")
    serve.add_argument("--config", help="TOML config file (also TOOLRT_CONFIG)")
    serve.add_argument("--listen", help="TCP address, e.g. 127.0.0.1:50051")
    serve.add_argument("--unix-socket", dest="unix_socket", help="also serve on this unix socket")
    serve.add_argument("--instance", help="this daemon's name in container labels")
    serve.add_argument("--image", help="default sandbox image")
    add_serve_flags(serve)
    serve.set_defaults(func=_serve)

    mcp = sub.add_parser("mcp", help="serve the tools as an MCP server on stdio")
    mcp.add_argument(
        "--target", default="", help="use a session on this running daemon (default: in-process)"
    )
    add_client_options(mcp, target=False)  # token and TLS of --target
    mcp.add_argument("--config", help="TOML config file of the in-process core")
    mcp.add_argument("--instance", help="container label of the in-process core (default: unique)")
    mcp.add_argument("--image", help="sandbox image")
    mcp.set_defaults(func=_mcp)
