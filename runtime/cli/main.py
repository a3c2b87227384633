"""`toolrt` (also `python -m runtime`): run the daemon or drive it."""

from __future__ import annotations

import argparse
import json
import sys
import tarfile

from runtime.cli import admin, image, run, serve, sessions, snapshots, tokens
from runtime.cli.options import add_client_options, connect


def _call(args: argparse.Namespace) -> int:
    with connect(args) as client:
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
    with connect(args) as client:
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

    serve.add_commands(sub)

    def client_parser(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        add_client_options(p)
        return p

    sessions.add_commands(sub)
    snapshots.add_commands(sub)
    tokens.add_commands(sub)
    admin.add_commands(sub)
    image.add_commands(sub)

    call = client_parser("call", "run one tool call: toolrt call SESSION TOOL JSON")
    call.add_argument("session_id")
    call.add_argument("tool")
    call.add_argument("arguments")
    call.set_defaults(func=_call)

    cp = client_parser("cp", "copy files: toolrt cp LOCAL SESSION:PATH, or SESSION:PATH LOCAL")
    cp.add_argument("source")
    cp.add_argument("dest")
    cp.set_defaults(func=_cp)
    run.add_commands(sub, client_parser)
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
