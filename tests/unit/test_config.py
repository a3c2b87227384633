"""Configuration sources, the example file, serve flags, and the pure lifecycle rules."""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from runtime.cli import build_parser
from runtime.cli.options import parse_size, serve_overrides, session_fields
from runtime.config import Config, Limits, PoolProfile, TenantQuota, load_config
from runtime.errors import AdmissionRefused
from runtime.policy.allowlist import PathPolicy
from runtime.sessions.admission import check_memory
from runtime.sessions.reaper import clamp_window, expiry_of
from runtime.sessions.session import CLOSING, Session

EXAMPLE = Path(__file__).resolve().parents[2] / "toolrt.example.toml"


def keys_of(model: type[BaseModel], prefix: str = "") -> set[str]:
    keys = set()
    for name, field in model.model_fields.items():
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            keys |= keys_of(sub, f"{prefix}{name}.")
        else:
            keys.add(prefix + name)
    return keys


# Settings that are maps of their own (any keys), not tables of settings.
MAPS = {"extra_labels", "network.hosts", "tenants"}


def flat(data: dict, prefix: str = "") -> set[str]:
    keys = set()
    for name, value in data.items():
        if isinstance(value, dict) and prefix + name not in MAPS:
            keys |= flat(value, f"{prefix}{name}.")
        else:
            keys.add(prefix + name)
    return keys


def test_the_example_file_lists_every_setting_at_its_default():
    data = tomllib.loads(EXAMPLE.read_text())
    assert flat(data) == keys_of(Config)
    assert load_config(EXAMPLE, environ={}) == Config()


def test_the_example_file_documents_every_tenant_key():
    text = EXAMPLE.read_text()
    block = text.split("\n# [tenants.alice]\n", 1)[1].split("\n\n", 1)[0]
    data = tomllib.loads("\n".join(line.removeprefix("# ") for line in block.splitlines()))
    assert set(data) == set(TenantQuota.model_fields)
    assert Config(tenants={"alice": data}).tenants["alice"].burst == 40


def test_tenant_tables_and_names():
    config = load_config(
        None,
        {"tenants": {"default": {"max_sessions": 2}, "alice": {"images": ["a:*"]}}},
        environ={"TOOLRT_UNIX_SOCKET_MODE": "0660", "TOOLRT_AUTH__TOKENS_FILE": "/t"},
    )
    assert config.unix_socket_mode == 0o660 and config.auth.tokens_file == "/t"
    assert config.auth.enabled
    assert config.quota_of("alice").images == ["a:*"]
    assert config.quota_of("bob").max_sessions == 2
    assert Config().quota_of("bob") is None and not Config().auth.enabled
    for bad in ("Alice", "a/b", "..", "", "a" * 64, "-a", "a b", "é"):
        with pytest.raises(ValidationError, match="not a tenant name"):
            Config(tenants={bad: {}})
    with pytest.raises(ValidationError, match="not a tenant name"):
        Config(auth={"unix_tenant": "../x"})
    with pytest.raises(ValidationError, match="octal mode"):
        load_config(None, {"unix_socket_mode": "rw"}, environ={})


def test_sources_in_order_file_env_flags(tmp_path):
    path = tmp_path / "toolrt.toml"
    path.write_text("max_sessions = 10\ndefault_ttl_seconds = 60\n[defaults]\npids = 50\n")
    environ = {"TOOLRT_MAX_SESSIONS": "20", "TOOLRT_DEFAULTS__PIDS": "70"}
    config = load_config(path, environ=environ)
    assert (config.max_sessions, config.default_ttl_seconds, config.defaults.pids) == (20, 60, 70)
    config = load_config(path, {"max_sessions": 30}, environ=environ)
    assert config.max_sessions == 30
    config = load_config(None, environ={"TOOLRT_CONFIG": str(path)})
    assert config.max_sessions == 10
    with pytest.raises(ValidationError, match="max_sesions"):
        load_config(None, {"max_sesions": 1}, environ={})
    with pytest.raises(ValidationError, match="reaper_interval_s"):
        load_config(None, {"reaper_interval_s": 0}, environ={})


def test_serve_flags_become_overrides():
    args = build_parser().parse_args(
        [
            "serve", "--max-sessions", "5", "--min-available-memory", "512M",
            "--default-ttl", "30", "--max-idle", "99", "--reaper-interval", "0.5",
            "--set", "maxima.cpus=4", "--set", 'extra_labels={team = "a"}',
            "--set", "log_level=DEBUG",
        ]
    )  # fmt: skip
    overrides = serve_overrides(args)
    assert overrides == {
        "max_sessions": 5,
        "min_available_memory_bytes": 512 << 20,
        "default_ttl_seconds": 30.0,
        "max_idle_seconds": 99.0,
        "reaper_interval_s": 0.5,
        "maxima.cpus": 4,
        "extra_labels": {"team": "a"},
        "log_level": "DEBUG",
    }
    config = load_config(None, overrides, environ={})
    assert config.maxima.cpus == 4 and config.extra_labels == {"team": "a"}
    assert serve_overrides(build_parser().parse_args(["serve"])) == {}


def test_operations_flags_and_the_pool_defaults():
    args = build_parser().parse_args(
        [
            "serve", "--log-format", "json", "--metrics-listen", "127.0.0.1:9464",
            "--otel-endpoint", "http://127.0.0.1:4318", "--pool-size", "0",
        ]
    )  # fmt: skip
    config = load_config(None, serve_overrides(args), environ={})
    assert config.log_format == "json" and config.metrics_listen == "127.0.0.1:9464"
    assert config.otel_endpoint == "http://127.0.0.1:4318" and config.pool_size == 0
    # Warm by default: a pool that keeps one ready and grows to 8 with demand.
    assert (Config().pool_size, Config().pool_min) == (8, 1)
    with pytest.raises(ValidationError, match="log_format"):
        Config(log_format="xml")


@pytest.mark.parametrize(
    ("text", "size"),
    [("1048576", 1 << 20), ("512M", 512 << 20), ("1.5GiB", 3 << 29), ("64k", 64 << 10)],
)
def test_sizes(text, size):
    assert parse_size(text) == size


def test_session_options_parse_limits_env_and_labels():
    args = build_parser().parse_args(
        [
            "sessions", "create", "--ttl", "60", "--env", "A=1=2", "--label", "t=x",
            "--limit", "memory_bytes=1G", "--limit", "cpus=0.5", "--limit", "pids=64",
            "--allow-host", "pypi.org", "--allow-host", "*.pythonhosted.org",
        ]
    )  # fmt: skip
    fields = session_fields(args)
    assert fields["network"] == {"allow": ["pypi.org", "*.pythonhosted.org"]}
    assert fields["env"] == {"A": "1=2"} and fields["labels"] == {"t": "x"}
    assert fields["limits"] == {"memory_bytes": 1 << 30, "cpus": 0.5, "pids": 64}
    assert fields["ttl_seconds"] == 60
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sessions", "create", "--limit", "pids=many"])


@pytest.mark.parametrize(
    ("asked", "default", "maximum", "expected"),
    [
        (0, 3600, 86400, 3600),  # the default
        (60, 3600, 86400, 60),  # asked for less
        (10**9, 3600, 86400, 86400),  # clamped
        (0, 0, 86400, 86400),  # no default: the ceiling still applies
        (0, 0, 0, 0),  # no limit at all
        (500, 0, 0, 500),
        (0, 7200, 100, 100),  # a default above the maximum is clamped too
    ],
)
def test_clamp_window(asked, default, maximum, expected):
    assert clamp_window(asked, default, maximum) == expected


def make_session(**fields) -> Session:
    values = {
        "id": "s",
        "tenant": "default",
        "image": "img",
        "limits": Limits(),
        "allowlist": PathPolicy(),
        "env": {},
        "labels": {},
        "sandbox": None,
        "ttl_seconds": 0.0,
        "idle_seconds": 0.0,
    }
    values.update(fields)
    return Session(**values)


def test_expiry_rules():
    wall, mono = time.time(), time.monotonic()
    fresh = make_session(ttl_seconds=100, idle_seconds=10, last_used=mono)
    assert fresh.expires_at == pytest.approx(fresh.created_at + 100)
    assert expiry_of(fresh, wall, mono) is None
    code, reason = expiry_of(fresh, fresh.expires_at, mono)
    assert (code, "lifetime" in reason) == ("ttl", True)
    code, reason = expiry_of(fresh, wall, mono + 10.5)
    assert (code, "idle limit" in reason) == ("idle", True)
    fresh.active_calls = 1  # a running call is activity
    assert expiry_of(fresh, wall, mono + 10.5) is None
    assert expiry_of(make_session(last_used=mono - 10**6), wall + 10**6, mono) is None
    closing = make_session(ttl_seconds=1, state=CLOSING)
    assert expiry_of(closing, wall + 100, mono) is None


def test_memory_floor():
    config = Config(min_available_memory_bytes=1 << 30)
    check_memory(config, lambda: 2 << 30)
    with pytest.raises(AdmissionRefused, match="512 MiB of memory available.*1024 MiB"):
        check_memory(config, lambda: 512 << 20)
    check_memory(Config(min_available_memory_bytes=0), lambda: 0)


MiB = 1 << 20


def test_config_refuses_defaults_and_pool_profiles_whose_tmpfs_fills_the_memory():
    with pytest.raises(ValidationError, match="defaults: workspace_bytes"):
        Config(defaults=Limits(workspace_bytes=500 * MiB))
    with pytest.raises(ValidationError, match=r"pool_profiles\[1\]"):
        Config(pool_profiles=[PoolProfile(), PoolProfile(tmp_bytes=400 * MiB)])
    assert Config(defaults=Limits(memory_bytes=2048 * MiB, workspace_bytes=1024 * MiB))
