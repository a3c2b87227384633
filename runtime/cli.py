"""`toolrt` (also `python -m runtime`): run the daemon or drive it."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tarfile
import uuid
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


def _mcp(args: argparse.Namespace) -> int:
    from runtime.mcp_front import LocalFront, RemoteFront, ToolFront, serve_mcp

    # stdout carries the protocol: logs go to stderr.
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    front: ToolFront
    if args.target:
        front = RemoteFront(args.target)
    else:
        overrides = {
            "instance": args.instance or f"toolrt-mcp-{uuid.uuid4().hex[:12]}",
            "image": args.image,
        }
        front = LocalFront(load_config(args.config, overrides))
    asyncio.run(serve_mcp(front))
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


def _cp(args: argparse.Namespace) -> int:
    from runtime.client.transfer import Remote, pack_for_upload, parse_location, unpack_download

    source, dest = parse_location(args.source), parse_location(args.dest)
    if isinstance(source, Remote) == isinstance(dest, Remote):
        print("toolrt cp: exactly one side must be SESSION:PATH", file=sys.stderr)
        return 2
    with _client(args) as client:
        try:
            if isinstance(dest, Remote):
                remote_path = dest.path + ("/" if args.dest.endswith("/") else "")
                tar, directory = pack_for_upload(str(source), remote_path)
                files, size = client.upload(dest.session_id, tar, directory)
                print(f"{files} file(s), {size} bytes -> {dest.session_id}:{dest.path}")
            elif isinstance(source, Remote):
                data = client.download(source.session_id, [source.path])
                print(f"{len(unpack_download(data, dest))} file(s) -> {dest}")
        except (OSError, tarfile.TarError) as exc:
            print(f"toolrt cp: {exc}", file=sys.stderr)
            return 1
    return 0


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

    mcp = sub.add_parser("mcp", help="serve the tools as an MCP server on stdio")
    mcp.add_argument(
        "--target", default="", help="use a session on this running daemon (default: in-process)"
    )
    mcp.add_argument("--config", help="TOML config file of the in-process core")
    mcp.add_argument("--instance", help="container label of the in-process core (default: unique)")
    mcp.add_argument("--image", help="sandbox image")
    mcp.set_defaults(func=_mcp)

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

    cp = client_parser("cp", "copy files: toolrt cp LOCAL SESSION:PATH, or SESSION:PATH LOCAL")
    cp.add_argument("source")
    cp.add_argument("dest")
    cp.set_defaults(func=_cp)
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
