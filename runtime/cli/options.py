"""Command-line options `toolrt` commands share: daemon flags, session requests."""

from __future__ import annotations

import argparse
import os
import re
import tomllib
from collections.abc import Iterator
from typing import Any

from runtime.config import Limits
from runtime.constants import DEFAULT_TARGET

_SIZE = re.compile(r"(?i)^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

# `toolrt serve` flag → config key (the values are validated by Config).
SERVE_FLAGS: list[tuple[str, str, type, str]] = [
    ("--log-level", "log_level", str, "DEBUG, INFO, WARNING, ..."),
    ("--log-format", "log_format", str, "text (terminals) or json (one object a line)"),
    ("--metrics-listen", "metrics_listen", str, "HOST:PORT serving Prometheus /metrics"),
    ("--otel-endpoint", "otel_endpoint", str, "OTLP/HTTP base URL receiving traces"),
    ("--pool-size", "pool_size", int, "most warm containers per profile (0: no pool)"),
    ("--runtime", "runtime", str, 'OCI runtime of sandboxes ("" or runsc)'),
    ("--max-sessions", "max_sessions", int, "live sessions before RESOURCE_EXHAUSTED"),
    (
        "--min-available-memory",
        "min_available_memory_bytes",
        str,
        "refuse new sessions below this much free host memory (e.g. 512M; 0: off)",
    ),
    ("--default-ttl", "default_ttl_seconds", float, "session lifetime when none is asked"),
    ("--max-ttl", "max_ttl_seconds", float, "longest session lifetime a client may ask"),
    ("--default-idle", "default_idle_seconds", float, "idle limit when none is asked"),
    ("--max-idle", "max_idle_seconds", float, "longest idle limit a client may ask"),
    ("--reaper-interval", "reaper_interval_s", float, "seconds between expiry sweeps"),
]


def add_client_options(parser: argparse.ArgumentParser, target: bool = True) -> None:
    """How a command reaches the daemon: address, token, TLS (flags, else TOOLRT_* variables).

    `target=False` leaves `--target` to the command (`toolrt mcp`, where none means in-process).
    """
    env = os.environ.get
    if target:
        parser.add_argument(
            "--target",
            default=env("TOOLRT_TARGET", DEFAULT_TARGET),
            help=f"daemon address: host:port or unix:PATH (TOOLRT_TARGET, else {DEFAULT_TARGET})",
        )
    parser.add_argument(
        "--token", default=env("TOOLRT_TOKEN", ""), help="bearer token (TOOLRT_TOKEN)"
    )
    parser.add_argument("--tls", action="store_true", help="speak TLS, trusting the system's CAs")
    tls = [
        ("--tls-ca", "TOOLRT_TLS_CA", "PEM CA of the daemon's certificate (implies --tls)"),
        ("--tls-cert", "TOOLRT_TLS_CERT", "PEM client certificate, for mutual TLS"),
        ("--tls-key", "TOOLRT_TLS_KEY", "PEM key of --tls-cert"),
    ]
    for flag, variable, help_text in tls:
        parser.add_argument(flag, default=env(variable, ""), help=f"{help_text} ({variable})")


def connect(args: argparse.Namespace) -> Any:
    """A client of the daemon the client options name."""
    from runtime.client import TLS, Client

    tls: bool | TLS = bool(args.tls)
    if args.tls_ca or args.tls_cert or args.tls_key:
        tls = TLS(ca_file=args.tls_ca, cert_file=args.tls_cert, key_file=args.tls_key)
    return Client(args.target, token=args.token, tls=tls)


def add_verb_group(
    sub: Any, name: str, help_text: str, actions: dict[str, str]
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """A verb with actions (`toolrt NAME ACTION`): yields each action and its parser."""
    group = sub.add_parser(name, help=help_text).add_subparsers(dest="action", required=True)
    for action, action_help in actions.items():
        yield action, group.add_parser(action, help=action_help)


def parse_size(text: str) -> int:
    """`1048576`, `512M`, `1.5GiB`, `64k` → bytes (binary units)."""
    match = _SIZE.match(text)
    if match is None:
        msg = f"{text!r} is not a size; expected bytes or a number with K, M, G or T"
        raise argparse.ArgumentTypeError(msg)
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        msg = f"{text!r}: expected KEY=VALUE"
        raise argparse.ArgumentTypeError(msg)
    return key, value


def parse_limit(text: str) -> tuple[str, int | float]:
    """`memory_bytes=1G` → ("memory_bytes", 1073741824)."""
    name, value = parse_pair(text)
    if name not in Limits.model_fields:
        msg = f"unknown limit {name!r}; known: {', '.join(Limits.model_fields)}"
        raise argparse.ArgumentTypeError(msg)
    if name.endswith("_bytes"):
        return name, parse_size(value)
    try:
        number = float(value)
    except ValueError:
        msg = f"limit {name}: {value!r} is not a number"
        raise argparse.ArgumentTypeError(msg) from None
    return name, number if Limits.model_fields[name].annotation is float else int(number)


def _toml_value(text: str) -> Any:
    """`--set` values are TOML when they parse (numbers, booleans, tables), else text."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def add_serve_flags(parser: argparse.ArgumentParser) -> None:
    for flag, key, kind, help_text in SERVE_FLAGS:
        parser.add_argument(flag, dest=f"cfg_{key}", type=kind, help=help_text)
    parser.add_argument(
        "--set",
        dest="cfg_set",
        action="append",
        default=[],
        type=parse_pair,
        metavar="KEY=VALUE",
        help="any config key, dotted for nested ones (e.g. defaults.memory_bytes=1073741824)",
    )


def serve_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The config overrides the serve flags ask for (absent flags are left out)."""
    overrides: dict[str, Any] = {key: _toml_value(value) for key, value in args.cfg_set}
    for _, key, _, _ in SERVE_FLAGS:
        value = getattr(args, f"cfg_{key}", None)
        if value is not None:
            overrides[key] = parse_size(value) if key.endswith("_bytes") else value
    return overrides


def add_session_options(parser: argparse.ArgumentParser) -> None:
    """Options of a CreateSession request (`sessions create`, `run`)."""
    parser.add_argument("--image", default="", help="sandbox image (default: the daemon's)")
    parser.add_argument(
        "--runtime",
        default="",
        help="OCI runtime, e.g. runsc for gVisor (default: the daemon's; see its `runtimes`)",
    )
    parser.add_argument("--ttl", type=int, default=0, help="session lifetime in seconds")
    parser.add_argument("--idle", type=int, default=0, help="close after this long without calls")
    pairs = [
        ("--env", "KEY=VALUE", "environment of every command in the session (repeatable)"),
        ("--label", "KEY=VALUE", "container label (repeatable; toolrt.* are reserved)"),
        (
            "--limit",
            "NAME=VALUE",
            f"session limit (repeatable): {', '.join(Limits.model_fields)}; "
            "sizes take K/M/G suffixes, e.g. memory_bytes=1G",
        ),
    ]
    for flag, metavar, help_text in pairs:
        kind = parse_limit if flag == "--limit" else parse_pair
        parser.add_argument(
            flag, action="append", default=[], type=kind, metavar=metavar, help=help_text
        )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="PATTERN",
        help="a host the session may reach through the daemon's proxy (repeatable): "
        "pypi.org, *.pythonhosted.org, github.com:443; within the daemon's network.allow_max",
    )


def command_fields(args: argparse.Namespace) -> dict[str, Any]:
    """`exec`'s and `run`'s --timeout, --cwd and -e, as a command's fields."""
    fields: dict[str, Any] = {}
    if args.timeout:
        fields["timeout_s"] = args.timeout
    if args.cwd:
        fields["cwd"] = args.cwd
    if args.call_env:
        fields["env"] = dict(args.call_env)
    return fields


def session_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The CreateSessionRequest fields the session options ask for."""
    fields: dict[str, Any] = {
        "image": args.image,
        "runtime": args.runtime,
        "ttl_seconds": args.ttl,
        "idle_seconds": args.idle,
        "env": dict(args.env),
        "labels": dict(args.label),
    }
    if args.limit:
        fields["limits"] = dict(args.limit)
    if args.allow_host:
        fields["network"] = {"allow": list(args.allow_host)}
    return fields
