"""Daemon configuration: one pydantic model with a default for every knob.

Sources, later ones winning: the defaults below, a TOML file
(`--config`/`TOOLRT_CONFIG`), environment variables `TOOLRT_<FIELD>` (nested
fields with `__`, e.g. `TOOLRT_DEFAULTS__MEMORY_BYTES`), then command-line
flags. Per-session requests are clamped to `maxima`.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from runtime.constants import DEFAULT_TARGET, DEFAULT_TENANT, WRITABLE_AREAS
from runtime.policy.addresses import HostError, ip_literal, normalize_host
from runtime.policy.hosts import PatternError, over_loopback_pins, parse_patterns

MiB = 1 << 20
GiB = 1 << 30


# The smallest CPU share a session gets. runc refuses a CFS quota under 1 ms
# per 100 ms period (0.01 CPUs) and a quota rounded down to 0 is no limit, but
# 0.01 is not enough either: the container's own init and the agent start
# inside the quota, and at 0.01 CPUs `docker start` alone can take minutes, far
# past create_timeout_s. At 0.1 CPUs a sandbox starts in a few seconds.
MIN_CPUS = 0.1


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
    runtime: str = ""
    """OCI runtime of the pooled containers ("" for `Config.runtime`; else
    one of `Config.runtimes`)."""


# DESIGN: a tenant name, wherever it comes from (config, token, certificate).
TENANT_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")


def tenant_name_problem(name: str) -> str:
    """Why `name` cannot be a tenant ("" when it can)."""
    if TENANT_NAME.fullmatch(name):
        return ""
    return (
        f"{name[:80]!r} is not a tenant name: expected 1 to 63 of a-z 0-9 _ . - "
        "starting with a letter or digit"
    )


class AuthConfig(BaseModel):
    """Who may call: tokens, TLS and client certificates, the unix socket's tenant."""

    model_config = ConfigDict(extra="forbid")

    tokens_file: str = ""
    """Hashed bearer tokens (`toolrt tokens create|list|revoke` edit it); read
    again within 5 s of a change. Empty: no tokens."""
    tls_cert_file: str = ""
    """PEM certificate (chain) of the TCP listener; with `tls_key_file` the
    daemon speaks TLS. Empty: plaintext."""
    tls_key_file: str = ""
    """PEM private key of `tls_cert_file`."""
    tls_client_ca_file: str = ""
    """PEM CA bundle for client certificates (mutual TLS): every TCP client
    must then present one it signed, and the certificate's URI SAN
    `toolrt://tenant/NAME` (else its CN) is the caller's tenant."""
    unix_tenant: str = DEFAULT_TENANT
    """Tenant of unix-socket callers that present no token (the socket's mode
    and group decide who can connect)."""

    @field_validator("unix_tenant")
    @classmethod
    def _tenant_name(cls, value: str) -> str:
        problem = tenant_name_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @property
    def enabled(self) -> bool:
        """Whether TCP callers must authenticate (tokens or client certificates)."""
        return bool(self.tokens_file or self.tls_client_ca_file)


class TenantQuota(BaseModel):
    """Ceilings of one tenant; a key left out sets none."""

    model_config = ConfigDict(extra="forbid")

    max_sessions: int | None = Field(None, ge=0)
    """Live sessions at once."""
    max_memory_bytes: int | None = Field(None, ge=0)
    """Memory of its live sessions, summed."""
    max_cpus: float | None = Field(None, ge=0)
    """CPUs of its live sessions, summed."""
    calls_per_second: float | None = Field(None, gt=0)
    """Tool calls per second, refilled continuously (a batch of N spends N)."""
    burst: int | None = Field(None, ge=1)
    """Calls that may come at once after a quiet spell (default: calls_per_second, at least 1)."""
    images: list[str] | None = None
    """Images it may use (fnmatch patterns, e.g. "toolrt-sandbox:*")."""
    runtimes: list[str] | None = None
    """OCI runtimes its sessions may run under, as in `runtime` ("" is the engine's default)."""
    secrets: list[str] | None = None
    """Secret names (from `secrets_file`) it may request."""
    network_allow_max: list[str] | None = None
    """Host patterns it may request (enforced once sessions get network egress)."""
    snapshot_max_bytes: int | None = Field(None, ge=0)
    """All its snapshots together, each distinct file content counted once."""
    # Permissions, not ceilings: granted only here, so a key left out
    # (or no table at all) grants nothing.
    users: list[str] = Field(default_factory=list)
    """Users besides the sandbox user its sessions may ask for (`users` at
    CreateSession; names or uids of the image, "root" and "0" alike)."""
    root_capabilities: bool = False
    """Root in its sessions granted root gets CHOWN, DAC_OVERRIDE, FOWNER,
    FSETID, SETUID and SETGID (enough for adduser); otherwise none."""
    writable_root: bool = False
    """Its sessions may ask for `root_filesystem = "writable"` (on a runtime
    that bounds it, `runsc-overlay`)."""


def _list_from_text(value: Any) -> Any:
    """A comma-separated string (from the environment) as a list; anything else as is."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class NetworkConfig(BaseModel):
    """Network egress: which hosts sessions may ask for, and what each may use."""

    model_config = ConfigDict(extra="forbid")

    allow_max: list[str] = Field(default_factory=list)
    """Host patterns sessions may request in `network.allow` (`pypi.org`,
    `*.pythonhosted.org`, `github.com:443`, `mirror.test:*`, `*`); a
    requested pattern outside them is PERMISSION_DENIED. Empty: no session
    gets network (and containers get no relay directory)."""
    hosts: dict[str, str] = Field(default_factory=dict)
    """Names the proxy resolves to a fixed address, the private-range check
    skipped (`"mirror.internal" = "10.0.0.5"`): for mirrors inside the
    operator's network. A session must still be allowed the name. The proxy
    never dials toolrt's own ports (gRPC, metrics) on this host, and a
    pattern of every port (`allow_max`, a tenant's `network_allow_max`)
    naming a name pinned to a loopback address stops the start."""
    max_bytes: int = Field(1 * GiB, ge=1)
    """Bytes one session may move through the proxy, both directions and
    all connections together; a session may ask for less."""
    max_connections: int = Field(64, ge=1)
    """Proxy connections one session may hold open at once; a session may
    ask for less."""
    idle_timeout_s: float = Field(120.0, gt=0)
    """A proxied connection without a byte either way for this long is closed."""
    connect_timeout_s: float = Field(10.0, gt=0)
    """Deadline of resolving a name and connecting to it (and of a client
    sending its request)."""
    socket_dir: str = ""
    """Host directory of the per-container relay socket directories ("":
    /run/toolrt/<instance> as root, else under $XDG_RUNTIME_DIR or /tmp).
    Socket paths must stay under 108 bytes: keep it short."""

    # From the environment: TOOLRT_NETWORK__ALLOW_MAX=pypi.org,*.pythonhosted.org
    _patterns_from_text = field_validator("allow_max", mode="before")(_list_from_text)

    @field_validator("allow_max")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        try:
            return [str(p) for p in parse_patterns(value, "network.allow_max")]
        except PatternError as exc:
            raise ValueError(str(exc)) from exc

    @field_validator("hosts")
    @classmethod
    def _pins(cls, value: dict[str, str]) -> dict[str, str]:
        pins: dict[str, str] = {}
        for name, address in value.items():
            try:
                host = normalize_host(name)
            except HostError as exc:
                msg = f"network.hosts: {exc}"
                raise ValueError(msg) from exc
            ip = ip_literal(address)
            if ip is None or address.strip() != str(ip):
                msg = f"network.hosts[{name!r}] = {address!r}: expected an IP address"
                raise ValueError(msg)
            pins[host] = str(ip)
        return pins


class SharesConfig(BaseModel):
    """What one tenant (or one session) may hold of what every tenant shares.

    Protection, not quotas: they apply whether or not `[tenants]` tables
    exist. Filling a share refuses that tenant (RESOURCE_EXHAUSTED naming the
    key) while the others keep being served; each refusal is counted in
    `toolrt_share_refusals_total{share}`.
    """

    model_config = ConfigDict(extra="forbid")

    transfers: int = Field(16, ge=1)
    """Uploads and downloads moving data at once, daemon-wide (each holds a
    window of chunks in the daemon); more wait for a slot."""
    transfers_per_tenant: int = Field(4, ge=1)
    """Of those, what one tenant may hold or wait for at once; one more is
    RESOURCE_EXHAUSTED."""
    transfer_idle_s: float = Field(30.0, gt=0)
    """An upload whose client sends nothing, or a download whose client
    takes nothing, for this long loses its slot and ends RESOURCE_EXHAUSTED."""
    execs_per_session: int = Field(16, ge=1)
    """Execs (the Exec RPC) one session runs at once; one more is
    RESOURCE_EXHAUSTED. Each holds a process tree in the sandbox and an
    agent stream in the daemon, with or without a client reading it."""
    execs_per_tenant: int = Field(64, ge=1)
    """Execs one tenant runs at once across its sessions; one more is
    RESOURCE_EXHAUSTED."""
    audit_network_records: int = Field(60, ge=1)
    """`network` audit records one session writes per minute. Repeats of a
    host, port and decision are counted into one record at the minute's end;
    beyond this many records, the rest of the minute is one summary line."""
    audit_pending_bytes: int = Field(16 * MiB, ge=64 * 1024)
    """Memory of audit records waiting while the log cannot be written;
    beyond it the oldest are dropped (and the drop is logged)."""
    proxy_connections: int = Field(1024, ge=1)
    """Egress proxy connections open at once, daemon-wide (each holds two
    file descriptors); never more than the descriptors left above `fd_reserve`."""
    proxy_connections_per_tenant: int = Field(256, ge=1)
    """Of those, what the sessions of one tenant may hold together."""
    fd_reserve: int = Field(256, ge=16)
    """File descriptors (of RLIMIT_NOFILE) kept for the daemon's own work
    (sessions, the state database, the audit log, RPCs): proxy connections
    are refused rather than eat into them."""
    state_reserve_bytes: int = Field(256 << 20, ge=0)
    """Free bytes of the state_dir's disk kept for the daemon's own records
    (sessions, the call journal): a snapshot that would leave less is refused
    (RESOURCE_EXHAUSTED), so a full blob store never stops calls or sessions."""
    snapshot_space: float = Field(0.5, gt=0, le=1)
    """The fraction of the snapshot space (what the store holds plus the
    disk's free bytes above `state_reserve_bytes`) one tenant's snapshots may
    hold, with or without `[tenants]` tables; `snapshot_max_bytes` may set less."""
    large_arguments_waiting: int = Field(8, ge=0)
    """Calls with large arguments (over 64 KiB) one tenant may have waiting
    while another of its large ones is parsed: a tenant's large arguments
    are parsed one at a time, and past this many waiting its next call is
    refused (RESOURCE_EXHAUSTED). Applies with or without `[tenants]`."""
    workspace_diffs_per_session: int = Field(1, ge=1)
    """`workspace_diff` calls of one session running at once (the others of
    a batch wait their turn): each may hold up to 16 MiB of changed files in
    the daemon while it compares."""
    workspace_diffs_per_tenant: int = Field(2, ge=1)
    """`workspace_diff` calls of one tenant running at once, over all its
    sessions; the others wait their turn. Applies with or without `[tenants]`."""


class Config(BaseModel):
    """Everything the daemon can be told; defaults are production-sane."""

    model_config = ConfigDict(extra="forbid")

    listen: str = DEFAULT_TARGET
    """TCP address of the gRPC server; empty to serve only on the unix socket."""
    unix_socket: str = ""
    """Path of an extra unix-socket listener (empty: none)."""
    unix_socket_mode: int = Field(0o600, ge=0, le=0o777)
    """File mode of the unix socket: who may connect (grpcio cannot tell the
    caller's uid). An octal string such as "0660" is read as octal."""
    unix_socket_group: str = ""
    """Group (name or number) of the unix socket; empty: the daemon's."""
    auth: AuthConfig = Field(default_factory=lambda: AuthConfig())
    """Authentication: tokens, TLS, client certificates, the unix socket's tenant."""
    tenants: dict[str, TenantQuota] = Field(default_factory=dict)
    """Per-tenant ceilings, `[tenants.NAME]`; an unlisted tenant gets
    `[tenants.default]` when it exists; no tables: no tenant ceilings."""
    audit_log: str = ""
    """Path of the audit log (one JSON object a line, appended and flushed
    before each answer); empty: none."""
    secrets_file: str = ""
    """Path of the secrets sessions may request by name (`NAME=value` lines),
    read at start-up; refused unless mode 0600 and owned by the daemon's
    user. Empty: none."""
    instance: str = "toolrtd"
    """This daemon's name in the `toolrt.daemon` label. At start-up the
    containers carrying it that the state database has sessions for are
    re-adopted and the others removed, so give each daemon sharing an engine
    its own name (and its own state_dir)."""
    state_dir: str = ""
    """Directory of the daemon's durable state (SQLite: sessions, the call
    journal, snapshots). Empty: /var/lib/toolrt/<instance> as root, else
    $XDG_STATE_HOME/toolrt/<instance>."""
    shutdown: Literal["keep", "close"] = "keep"
    """On SIGTERM: "keep" leaves sessions running for the next start (in-flight
    RPCs end UNAVAILABLE, retryable); "close" closes them (SANDBOX_LOST).
    Warm-pool containers are removed either way."""
    snapshot_ttl_seconds: int = Field(7 * 24 * 3600, ge=60)
    """How long a snapshot is kept (`Snapshot.expires_at`)."""
    image: str = "toolrt-sandbox:default"
    """Image of a session that does not name one. toolrt never pulls."""
    runtime: str = ""
    """OCI runtime of a session that names none ("" for the engine's default,
    or "runsc" for gVisor: a second wall between commands and the host kernel)."""
    runtimes: list[str] = Field(default_factory=list)
    """Other OCI runtimes a session may ask for (`CreateSessionRequest.runtime`),
    e.g. ["runc", "runsc"]; each must be registered with the engine. Empty:
    every session runs under `runtime`."""
    docker_host: str = ""
    """Engine address (unix:// only); empty: DOCKER_HOST or /var/run/docker.sock."""
    docker_timeout_s: float = Field(30.0, gt=0)
    """Deadline of each Docker API operation."""
    create_timeout_s: float = Field(60.0, gt=0)
    """Deadline for a new sandbox to answer its first hello."""
    docker_workers: int = Field(32, ge=1)
    """Threads that run the (blocking) Docker SDK, so dozens of sessions can
    be created or closed at once without touching the event loop."""
    agent: Literal["static"] = "static"
    """The in-sandbox agent: the static binary `make agent` builds (Go, no
    libc) beside the C launcher it starts every command with; the platform
    wheel carries both. It runs in any Linux image of the host's
    architecture, python3 or not. The daemon refuses to start when either is
    missing. (The Python agent, "python", was removed; so was `native_spawn`:
    every command starts through the launcher.)"""
    spare_shell: bool = True
    """While a session is idle, keep the next call's shell started ahead (one
    per session, about 0.5 MiB): a call that can use it skips the shell's
    start. Never while the sandbox's memory or pids are nearly full; calls
    with stdin, or whose cwd or startup-relevant environment differs from the
    latest call's, start their own shell as before. Bash only: the spare
    waits with bash's `read -n 1 -u` and `read -d ''`, so an image without
    /bin/bash (BusyBox's sh) gets no spare and each call starts its own."""
    kill_grace_s: float = Field(0.5, ge=0, le=5)
    """Time between TERM and KILL when a call's processes are stopped."""
    result_cap_bytes: int = Field(2 * MiB, ge=64 * 1024)
    """Largest encoded ToolResult output, whatever a command printed."""
    stream_cap_bytes: int = Field(8 * MiB, ge=0)
    """Raw bytes of live output ExecuteStream relays per call."""
    exec_output_cap_bytes: int = Field(64 * MiB, ge=0)
    """Bytes of each output stream (stdout, stderr) an `Exec` sends: its
    `output_cap_bytes` when 0 and its ceiling (the rest is counted in
    ExecExit, not sent). A client that reads slowly holds its program back
    (flow control), so the daemon holds a small window per Exec, not this."""
    file_max_bytes: int = Field(1024 * MiB, ge=0)
    """Largest file `ReadFile` sends: its `max_bytes` when 0 and its ceiling
    (a larger file is FILE_TOO_LARGE, never cut)."""
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
    max_argument_bytes: int = Field(4 * MiB, ge=1)
    """Largest `arguments_json` of a tool call, in bytes of UTF-8 (beyond:
    INVALID_ARGUMENTS). Parsing holds the daemon's interpreter lock: 4 MiB
    takes tens of milliseconds during which no other RPC is served."""
    fair_start_slots: int = Field(0, ge=0)
    """While two or more tenants are calling, each may start one call at once
    freely and the calls beyond share this many slots, taken in turn by
    tenant (0: half the host's cores, at least 1: with the free calls of two
    calling tenants, about one call starting per core)."""
    fair_start_slice_s: float = Field(0.1, ge=0)
    """How long a call holds its slot at most (a longer call runs on without
    it); 0 turns taking turns off."""
    defaults: Limits = Field(default_factory=lambda: Limits())
    """Limits of a session that asks for none."""
    maxima: Limits = Field(default_factory=lambda: DEFAULT_MAXIMA.model_copy())
    """Ceilings every session request is clamped to."""
    shell: ShellConfig = Field(default_factory=lambda: ShellConfig())
    """Shell semantics: head/tail split, silence detection, background processes."""
    extra_labels: dict[str, str] = Field(default_factory=dict)
    """Labels added to every container (cannot override `toolrt.*`)."""
    pool_size: int = Field(8, ge=0)
    """Most ready containers kept warm per pool profile (0: no pool, every
    CreateSession starts a container). Below it the pool sizes itself from
    recent demand; warm containers count toward `max_sessions`."""
    pool_min: int = Field(1, ge=0)
    """Ready containers each profile keeps even when idle (capped by
    `pool_size`), so a first session after a quiet spell is warm too."""
    pool_window_s: float = Field(30.0, gt=0)
    """Demand window of the pool: a profile keeps as many ready containers as
    its busiest second over this many seconds needed (at least `pool_min`),
    and removes the surplus once demand has stayed lower for a whole window."""
    pool_profiles: list[PoolProfile] = Field(default_factory=list)
    """Kinds of warm containers (image, tmpfs sizes, runtime); empty: one
    profile of the defaults. Memory, cpus and pids are
    set when a session claims one; other requests are served cold."""
    log_level: str = "INFO"
    """Python logging level of the daemon."""
    network: NetworkConfig = Field(default_factory=lambda: NetworkConfig())
    """Network egress through the daemon's proxy (none unless `allow_max` is set)."""
    shares: SharesConfig = Field(default_factory=lambda: SharesConfig())
    """What one tenant may hold of what all share (transfer slots, audit
    records, proxy connections, file descriptors), with or without `[tenants]`."""
    log_format: Literal["text", "json"] = "text"
    """`text` for terminals, `json` for machines: one object per line with
    `ts`, `level`, `logger`, `message`, and `session_id`/`call_id` where
    they apply. Neither carries arguments or outputs at INFO."""
    metrics_listen: str = ""
    """HOST:PORT serving Prometheus text at /metrics (e.g. "127.0.0.1:9464");
    empty: off."""
    otel_endpoint: str = ""
    """OTLP/HTTP base URL of a trace collector (e.g. "http://127.0.0.1:4318"):
    a span per RPC and one per tool call, continuing a caller's W3C
    `traceparent`. Empty: off, and OpenTelemetry is not even imported."""
    agent_dir: str = ""
    """Directory the agent is copied to (with its native helper, built there
    when a C compiler exists) and bind-mounted from; empty: the installed
    package's own directory. A daemon in a container needs a path that is
    the same inside and on the host, since the engine resolves bind mounts
    on the host."""
    allowlist_max_roots: list[str] = Field(default_factory=lambda: list(WRITABLE_AREAS))
    """Ceiling of every session's path allowlist: requested read/write roots
    must lie below one of these (else INVALID_ARGUMENT)."""

    @field_validator("unix_socket_mode", mode="before")
    @classmethod
    def _mode_from_text(cls, value: Any) -> Any:
        # From the environment or --set: "0660" means octal, as for chmod.
        if isinstance(value, str):
            try:
                return int(value, 8)
            except ValueError:
                msg = f"unix_socket_mode {value!r}: expected an octal mode such as 0660"
                raise ValueError(msg) from None
        return value

    @field_validator("tenants")
    @classmethod
    def _tenant_names(cls, value: dict[str, TenantQuota]) -> dict[str, TenantQuota]:
        for name in value:
            problem = tenant_name_problem(name)
            if problem:
                msg = f"[tenants.{name}]: {problem}"
                raise ValueError(msg)
        return value

    def quota_of(self, tenant: str) -> TenantQuota | None:
        """The tenant's table, else `[tenants.default]`, else None (no ceilings)."""
        return self.tenants.get(tenant) or self.tenants.get(DEFAULT_TENANT)

    # From the environment: TOOLRT_ALLOWLIST_MAX_ROOTS=/workspace,/srv
    _roots_from_text = field_validator("allowlist_max_roots", mode="before")(_list_from_text)

    def allowed_runtimes(self) -> list[str]:
        """`runtime` first, then `runtimes`: the names a session may ask for."""
        return [self.runtime] + [r for r in self.runtimes if r != self.runtime]

    @model_validator(mode="after")
    def _pool_runtimes_allowed(self) -> Config:
        for index, profile in enumerate(self.pool_profiles):
            if profile.runtime and profile.runtime not in self.allowed_runtimes():
                msg = (
                    f"pool_profiles[{index}].runtime {profile.runtime!r} is neither "
                    f"`runtime` nor one of `runtimes` ({self.allowed_runtimes()})"
                )
                raise ValueError(msg)
        return self

    @model_validator(mode="after")
    def _no_wildcard_port_over_loopback(self) -> Config:
        # A pattern of every port on a name pinned to loopback would let
        # sessions reach toolrt itself; the proxy refuses its own ports
        # anyway, but such a config is a mistake to say at start.
        ceilings = [("network.allow_max", self.network.allow_max)]
        ceilings += [
            (f"tenants.{name}.network_allow_max", quota.network_allow_max)
            for name, quota in self.tenants.items()
            if quota.network_allow_max is not None
        ]
        for where, texts in ceilings:
            try:
                patterns = parse_patterns(texts, where)
            except PatternError as exc:
                raise ValueError(str(exc)) from exc
            problem = over_loopback_pins(patterns, self.network.hosts, where)
            if problem:
                raise ValueError(problem)
        return self

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
