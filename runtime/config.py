"""Daemon configuration: one pydantic model with a default for every knob.

Sources, later ones winning: the defaults below, a TOML file
(`--config`/`TOOLRT_CONFIG`), environment variables `TOOLRT_<FIELD>` (nested
fields with `__`, e.g. `TOOLRT_DEFAULTS__MEMORY_BYTES`), then command-line
flags. Per-session requests are clamped to `maxima`.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from runtime.constants import DEFAULT_TARGET, WRITABLE_AREAS

MiB = 1 << 20
GiB = 1 << 30


# The smallest CPU share a container can get: a CFS quota of 1 ms per
# 100 ms period (runc refuses less; a quota rounded down to 0 is no limit).
MIN_CPUS = 0.01


class Limits(BaseModel):
    """Resource limits of one session; 0 in a request means "the default"."""

    model_config = ConfigDict(extra="forbid")

    memory_bytes: int = Field(512 * MiB, ge=0)
    """Memory of the whole container, tmpfs pages included (no swap)."""
    cpus: float = Field(1.0, ge=0)
    """CPU share of the container, in cores."""
    pids: int = Field(256, ge=0)
    """Processes and threads the container may hold at once."""
    workspace_bytes: int = Field(256 * MiB, ge=0)
    """Size of the /workspace tmpfs."""
    tmp_bytes: int = Field(64 * MiB, ge=0)
    """Size of the /tmp tmpfs."""
    call_timeout_s: float = Field(120.0, ge=0)
    """Wall-clock limit of one call; a call may ask for less, never more."""
    max_calls: int = Field(10_000, ge=0)
    """Tool calls one session may make before BUDGET_EXHAUSTED."""
    output_cap_bytes: int = Field(1 * MiB, ge=0)
    """Bytes of stdout (and, separately, stderr) kept per call."""

    def merged_over(self, defaults: Limits, maxima: Limits) -> Limits:
        """This request's non-zero values over `defaults`, clamped to `maxima`."""
        merged: dict[str, Any] = {}
        for name in Limits.model_fields:
            asked = getattr(self, name)
            value = asked if asked else getattr(defaults, name)
            merged[name] = min(value, getattr(maxima, name))
        if merged["cpus"]:
            # Less than the engine can enforce is not "no limit": the least it can.
            merged["cpus"] = max(merged["cpus"], MIN_CPUS)
        return Limits(**merged)


# Memory a sandbox keeps for its processes beyond its tmpfs filesystems.
TMPFS_HEADROOM_BYTES = 64 * MiB


def tmpfs_overflow(workspace_bytes: int, tmp_bytes: int, memory_bytes: int) -> str:
    """Why these sizes cannot work together ("" when they can).

    tmpfs pages count against the container's memory limit: a workspace
    that may fill the memory gets every later command OOM-killed.
    """
    room = memory_bytes - TMPFS_HEADROOM_BYTES
    if workspace_bytes + tmp_bytes <= room:
        return ""
    return (
        f"workspace_bytes {workspace_bytes} + tmp_bytes {tmp_bytes} = "
        f"{workspace_bytes + tmp_bytes} exceeds memory_bytes {memory_bytes} less "
        f"{TMPFS_HEADROOM_BYTES >> 20} MiB for processes ({room}); files in /workspace and "
        "/tmp are held in the sandbox's memory, so ask for more memory or smaller filesystems"
    )


DEFAULT_MAXIMA = Limits(
    memory_bytes=8 * GiB,
    cpus=2.0,
    pids=4096,
    workspace_bytes=4 * GiB,
    tmp_bytes=2 * GiB,
    call_timeout_s=3600.0,
    max_calls=1_000_000,
    output_cap_bytes=8 * MiB,
)


class ShellConfig(BaseModel):
    """How `shell` and the background-process tools behave."""

    model_config = ConfigDict(extra="forbid")

    head_fraction: float = Field(0.2, ge=0, le=1)
    """Share of the output cap kept from the start of a stream (the rest is its end)."""
    idle_timeout_s: float = Field(60.0, gt=0)
    """Default silence after which a command counts as waiting on something."""
    settle_s: float = Field(0.5, ge=0, le=30)
    """How long `background: true` waits for first output before answering."""
    max_background: int = Field(8, ge=0)
    """Background processes one session may keep alive at once."""
    background_buffer_bytes: int = Field(256 * 1024, ge=1024)
    """Ring buffer of output kept per background process."""


class PoolProfile(BaseModel):
    """One kind of warm container; 0/"" fields take the daemon's defaults."""

    model_config = ConfigDict(extra="forbid")

    image: str = ""
    """Image of the pooled containers ("" for `Config.image`)."""
    workspace_bytes: int = Field(0, ge=0)
    """Size of their /workspace tmpfs (0 for `defaults.workspace_bytes`)."""
    tmp_bytes: int = Field(0, ge=0)
    """Size of their /tmp tmpfs (0 for `defaults.tmp_bytes`)."""


class Config(BaseModel):
    """Everything the daemon can be told; defaults are production-sane."""

    model_config = ConfigDict(extra="forbid")

    listen: str = DEFAULT_TARGET
    """TCP address of the gRPC server; empty to serve only on the unix socket."""
    unix_socket: str = ""
    """Path of an extra unix-socket listener (empty: none)."""
    instance: str = "toolrtd"
    """This daemon's name in the `toolrt.daemon` label. Containers carrying it
    from an earlier run are removed at start-up, so give each daemon sharing
    an engine its own name."""
    image: str = "toolrt-sandbox:default"
    """Image of a session that does not name one. toolrt never pulls."""
    runtime: str = ""
    """OCI runtime of sandbox containers ("" for the engine's default, or "runsc")."""
    docker_host: str = ""
    """Engine address (unix:// only); empty: DOCKER_HOST or /var/run/docker.sock."""
    docker_timeout_s: float = Field(30.0, gt=0)
    """Deadline of each Docker API operation."""
    create_timeout_s: float = Field(60.0, gt=0)
    """Deadline for a new sandbox to answer its first hello."""
    docker_workers: int = Field(32, ge=1)
    """Threads that run the (blocking) Docker SDK, so dozens of sessions can
    be created or closed at once without touching the event loop."""
    native_spawn: bool = True
    """Start each call's subreaper with the agent's C helper (`make helper`)
    rather than a fork of the agent: same behaviour, a few ms less per call.
    Without the helper binary the agent forks regardless."""
    kill_grace_s: float = Field(0.5, ge=0, le=5)
    """Time between TERM and KILL when a call's processes are stopped."""
    result_cap_bytes: int = Field(2 * MiB, ge=64 * 1024)
    """Largest encoded ToolResult output, whatever a command printed."""
    stream_cap_bytes: int = Field(8 * MiB, ge=0)
    """Raw bytes of live output ExecuteStream relays per call."""
    max_sessions: int = Field(256, ge=1)
    """Live sessions (pooled containers included) before RESOURCE_EXHAUSTED."""
    min_available_memory_bytes: int = Field(256 * MiB, ge=0)
    """CreateSession answers RESOURCE_EXHAUSTED while the host's available
    memory (psutil) is below this floor; 0 turns the check off."""
    default_ttl_seconds: float = Field(3600.0, ge=0)
    """Lifetime of a session that asks for none; 0: no limit but the maximum."""
    max_ttl_seconds: float = Field(86400.0, ge=0)
    """Longest lifetime a session may ask for; 0: no ceiling."""
    default_idle_seconds: float = Field(900.0, ge=0)
    """A session without a call for this long is closed (when it asks for no
    other value); 0: no limit but the maximum."""
    max_idle_seconds: float = Field(86400.0, ge=0)
    """Longest idle limit a session may ask for; 0: no ceiling."""
    reaper_interval_s: float = Field(1.0, gt=0)
    """How often expired and idle sessions are looked for and closed."""
    journal_max_results: int = Field(1024, ge=1)
    """Results a session keeps to answer a repeated call id without running
    it again (the most recent ones)."""
    journal_max_bytes: int = Field(8 * MiB, ge=0)
    """Bytes of kept results per session; older results are dropped first."""
    journal_max_ids: int = Field(20_000, ge=0)
    """Call ids (without their results) a session remembers after their
    results were dropped, so that a repeat is refused instead of run again."""
    defaults: Limits = Field(default_factory=lambda: Limits())
    """Limits of a session that asks for none."""
    maxima: Limits = Field(default_factory=lambda: DEFAULT_MAXIMA.model_copy())
    """Ceilings every session request is clamped to."""
    shell: ShellConfig = Field(default_factory=lambda: ShellConfig())
    """Shell semantics: head/tail split, silence detection, background processes."""
    extra_labels: dict[str, str] = Field(default_factory=dict)
    """Labels added to every container (cannot override `toolrt.*`)."""
    pool_size: int = Field(0, ge=0)
    """Ready containers kept warm per pool profile (0: no pool, every
    CreateSession starts a container). They count toward `max_sessions`."""
    pool_profiles: list[PoolProfile] = Field(default_factory=list)
    """Kinds of warm containers (image + tmpfs sizes; the runtime is
    `runtime`); empty: one profile of the defaults. Memory, cpus and pids are
    set when a session claims one; other requests are served cold."""
    log_level: str = "INFO"
    """Python logging level of the daemon."""
    allowlist_max_roots: list[str] = Field(default_factory=lambda: list(WRITABLE_AREAS))
    """Ceiling of every session's path allowlist: requested read/write roots
    must lie below one of these (else INVALID_ARGUMENT)."""

    @field_validator("allowlist_max_roots", mode="before")
    @classmethod
    def _roots_from_text(cls, value: Any) -> Any:
        # From the environment: TOOLRT_ALLOWLIST_MAX_ROOTS=/workspace,/srv
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _tmpfs_fits_memory(self) -> Config:
        # A session of the defaults, and every warm container (created with
        # the default memory), must be able to fill its filesystems and run.
        memory = self.defaults.memory_bytes
        checks = [("defaults", self.defaults.workspace_bytes, self.defaults.tmp_bytes)]
        checks += [
            (
                f"pool_profiles[{index}]",
                profile.workspace_bytes or self.defaults.workspace_bytes,
                profile.tmp_bytes or self.defaults.tmp_bytes,
            )
            for index, profile in enumerate(self.pool_profiles)
        ]
        for where, workspace, tmp in checks:
            problem = tmpfs_overflow(workspace, tmp, memory)
            if problem:
                msg = f"{where}: {problem} (defaults.memory_bytes)"
                raise ValueError(msg)
        return self


def _set_path(target: dict[str, Any], dotted: list[str], value: Any) -> None:
    for key in dotted[:-1]:
        target = target.setdefault(key, {})
    target[dotted[-1]] = value


def load_config(
    path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> Config:
    """Defaults < TOML file < TOOLRT_* environment < overrides (flags)."""
    environ = dict(os.environ if environ is None else environ)
    data: dict[str, Any] = {}
    path = path or environ.get("TOOLRT_CONFIG") or None
    if path:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    for key, value in environ.items():
        if not key.startswith("TOOLRT_") or key == "TOOLRT_CONFIG":
            continue
        dotted = key[len("TOOLRT_") :].lower().split("__")
        if dotted[0] in Config.model_fields:
            _set_path(data, dotted, value)
    for key, value in (overrides or {}).items():
        if value is not None:
            _set_path(data, key.split("."), value)
    return Config.model_validate(data)
