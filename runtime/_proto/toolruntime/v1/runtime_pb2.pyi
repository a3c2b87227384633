from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Limits(_message.Message):
    __slots__ = ("memory_bytes", "cpus", "pids", "workspace_bytes", "tmp_bytes", "call_timeout_s", "max_calls", "output_cap_bytes")
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TMP_BYTES_FIELD_NUMBER: _ClassVar[int]
    CALL_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    MAX_CALLS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_CAP_BYTES_FIELD_NUMBER: _ClassVar[int]
    memory_bytes: int
    cpus: float
    pids: int
    workspace_bytes: int
    tmp_bytes: int
    call_timeout_s: float
    max_calls: int
    output_cap_bytes: int
    def __init__(self, memory_bytes: _Optional[int] = ..., cpus: _Optional[float] = ..., pids: _Optional[int] = ..., workspace_bytes: _Optional[int] = ..., tmp_bytes: _Optional[int] = ..., call_timeout_s: _Optional[float] = ..., max_calls: _Optional[int] = ..., output_cap_bytes: _Optional[int] = ...) -> None: ...

class Allowlist(_message.Message):
    __slots__ = ("read_roots", "write_roots", "deny_globs")
    READ_ROOTS_FIELD_NUMBER: _ClassVar[int]
    WRITE_ROOTS_FIELD_NUMBER: _ClassVar[int]
    DENY_GLOBS_FIELD_NUMBER: _ClassVar[int]
    read_roots: _containers.RepeatedScalarFieldContainer[str]
    write_roots: _containers.RepeatedScalarFieldContainer[str]
    deny_globs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, read_roots: _Optional[_Iterable[str]] = ..., write_roots: _Optional[_Iterable[str]] = ..., deny_globs: _Optional[_Iterable[str]] = ...) -> None: ...

class NetworkPolicy(_message.Message):
    __slots__ = ("allow", "max_bytes", "max_connections")
    ALLOW_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    allow: _containers.RepeatedScalarFieldContainer[str]
    max_bytes: int
    max_connections: int
    def __init__(self, allow: _Optional[_Iterable[str]] = ..., max_bytes: _Optional[int] = ..., max_connections: _Optional[int] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ("image", "limits", "allowlist", "env", "ttl_seconds", "idle_seconds", "labels", "workspace_tar", "secrets", "network", "runtime", "from_snapshot", "users", "root_filesystem")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    ALLOWLIST_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    IDLE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_TAR_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    FROM_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    USERS_FIELD_NUMBER: _ClassVar[int]
    ROOT_FILESYSTEM_FIELD_NUMBER: _ClassVar[int]
    image: str
    limits: Limits
    allowlist: Allowlist
    env: _containers.ScalarMap[str, str]
    ttl_seconds: int
    idle_seconds: int
    labels: _containers.ScalarMap[str, str]
    workspace_tar: bytes
    secrets: _containers.RepeatedScalarFieldContainer[str]
    network: NetworkPolicy
    runtime: str
    from_snapshot: str
    users: _containers.RepeatedScalarFieldContainer[str]
    root_filesystem: str
    def __init__(self, image: _Optional[str] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., allowlist: _Optional[_Union[Allowlist, _Mapping]] = ..., env: _Optional[_Mapping[str, str]] = ..., ttl_seconds: _Optional[int] = ..., idle_seconds: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., workspace_tar: _Optional[bytes] = ..., secrets: _Optional[_Iterable[str]] = ..., network: _Optional[_Union[NetworkPolicy, _Mapping]] = ..., runtime: _Optional[str] = ..., from_snapshot: _Optional[str] = ..., users: _Optional[_Iterable[str]] = ..., root_filesystem: _Optional[str] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("id", "state", "image", "limits", "allowlist", "created_at", "expires_at", "labels", "calls", "ttl_seconds", "idle_seconds", "tenant", "secrets", "network", "runtime", "closed_reason", "users", "root_filesystem")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    ALLOWLIST_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    IDLE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    CLOSED_REASON_FIELD_NUMBER: _ClassVar[int]
    USERS_FIELD_NUMBER: _ClassVar[int]
    ROOT_FILESYSTEM_FIELD_NUMBER: _ClassVar[int]
    id: str
    state: str
    image: str
    limits: Limits
    allowlist: Allowlist
    created_at: float
    expires_at: float
    labels: _containers.ScalarMap[str, str]
    calls: int
    ttl_seconds: float
    idle_seconds: float
    tenant: str
    secrets: _containers.RepeatedScalarFieldContainer[str]
    network: NetworkPolicy
    runtime: str
    closed_reason: str
    users: _containers.RepeatedScalarFieldContainer[str]
    root_filesystem: str
    def __init__(self, id: _Optional[str] = ..., state: _Optional[str] = ..., image: _Optional[str] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., allowlist: _Optional[_Union[Allowlist, _Mapping]] = ..., created_at: _Optional[float] = ..., expires_at: _Optional[float] = ..., labels: _Optional[_Mapping[str, str]] = ..., calls: _Optional[int] = ..., ttl_seconds: _Optional[float] = ..., idle_seconds: _Optional[float] = ..., tenant: _Optional[str] = ..., secrets: _Optional[_Iterable[str]] = ..., network: _Optional[_Union[NetworkPolicy, _Mapping]] = ..., runtime: _Optional[str] = ..., closed_reason: _Optional[str] = ..., users: _Optional[_Iterable[str]] = ..., root_filesystem: _Optional[str] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions",)
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[Session]
    def __init__(self, sessions: _Optional[_Iterable[_Union[Session, _Mapping]]] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("session_id", "state")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    state: str
    def __init__(self, session_id: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ("dialect", "session_id")
    DIALECT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    dialect: str
    session_id: str
    def __init__(self, dialect: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools_json",)
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    tools_json: str
    def __init__(self, tools_json: _Optional[str] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments_json: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_json: _Optional[str] = ...) -> None: ...

class ToolError(_message.Message):
    __slots__ = ("code", "message", "retryable")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    retryable: bool
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., retryable: _Optional[bool] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("call_id", "ok", "output_json", "error", "duration_ms")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    ok: bool
    output_json: str
    error: ToolError
    duration_ms: int
    def __init__(self, call_id: _Optional[str] = ..., ok: _Optional[bool] = ..., output_json: _Optional[str] = ..., error: _Optional[_Union[ToolError, _Mapping]] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class ExecuteRequest(_message.Message):
    __slots__ = ("session_id", "call")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    call: ToolCall
    def __init__(self, session_id: _Optional[str] = ..., call: _Optional[_Union[ToolCall, _Mapping]] = ...) -> None: ...

class ExecuteBatchRequest(_message.Message):
    __slots__ = ("session_id", "calls")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    def __init__(self, session_id: _Optional[str] = ..., calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ...) -> None: ...

class ExecuteBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ToolResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ToolResult, _Mapping]]] = ...) -> None: ...

class ExecuteEvent(_message.Message):
    __slots__ = ("stdout", "stderr", "result")
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    stdout: bytes
    stderr: bytes
    result: ToolResult
    def __init__(self, stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., result: _Optional[_Union[ToolResult, _Mapping]] = ...) -> None: ...

class ExecuteMessageRequest(_message.Message):
    __slots__ = ("session_id", "dialect", "message_json")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DIALECT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_JSON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    dialect: str
    message_json: str
    def __init__(self, session_id: _Optional[str] = ..., dialect: _Optional[str] = ..., message_json: _Optional[str] = ...) -> None: ...

class ExecuteMessageResponse(_message.Message):
    __slots__ = ("results_json", "results")
    RESULTS_JSON_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results_json: str
    results: _containers.RepeatedCompositeFieldContainer[ToolResult]
    def __init__(self, results_json: _Optional[str] = ..., results: _Optional[_Iterable[_Union[ToolResult, _Mapping]]] = ...) -> None: ...

class UploadFilesRequest(_message.Message):
    __slots__ = ("session_id", "tar", "path")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TAR_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    tar: bytes
    path: str
    def __init__(self, session_id: _Optional[str] = ..., tar: _Optional[bytes] = ..., path: _Optional[str] = ...) -> None: ...

class UploadFilesResponse(_message.Message):
    __slots__ = ("files", "bytes")
    FILES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    files: int
    bytes: int
    def __init__(self, files: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class DownloadFilesRequest(_message.Message):
    __slots__ = ("session_id", "paths")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    paths: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session_id: _Optional[str] = ..., paths: _Optional[_Iterable[str]] = ...) -> None: ...

class DownloadFilesChunk(_message.Message):
    __slots__ = ("tar",)
    TAR_FIELD_NUMBER: _ClassVar[int]
    tar: bytes
    def __init__(self, tar: _Optional[bytes] = ...) -> None: ...

class AdminStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PoolProfileStats(_message.Message):
    __slots__ = ("image", "workspace_bytes", "tmp_bytes", "ready", "filling", "target")
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TMP_BYTES_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    FILLING_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    image: str
    workspace_bytes: int
    tmp_bytes: int
    ready: int
    filling: int
    target: int
    def __init__(self, image: _Optional[str] = ..., workspace_bytes: _Optional[int] = ..., tmp_bytes: _Optional[int] = ..., ready: _Optional[int] = ..., filling: _Optional[int] = ..., target: _Optional[int] = ...) -> None: ...

class AdminStatsResponse(_message.Message):
    __slots__ = ("version", "instance", "started_at", "uptime_seconds", "engine", "engine_error", "runtime", "sessions", "max_sessions", "sessions_created", "sessions_closed", "pool", "calls_per_second", "calls_total", "errors", "healthy")
    class SessionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class SessionsCreatedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class SessionsClosedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ErrorsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    VERSION_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    UPTIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ERROR_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_CREATED_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_CLOSED_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    CALLS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    CALLS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    version: str
    instance: str
    started_at: float
    uptime_seconds: float
    engine: str
    engine_error: str
    runtime: str
    sessions: _containers.ScalarMap[str, int]
    max_sessions: int
    sessions_created: _containers.ScalarMap[str, int]
    sessions_closed: _containers.ScalarMap[str, int]
    pool: _containers.RepeatedCompositeFieldContainer[PoolProfileStats]
    calls_per_second: float
    calls_total: int
    errors: _containers.ScalarMap[str, int]
    healthy: bool
    def __init__(self, version: _Optional[str] = ..., instance: _Optional[str] = ..., started_at: _Optional[float] = ..., uptime_seconds: _Optional[float] = ..., engine: _Optional[str] = ..., engine_error: _Optional[str] = ..., runtime: _Optional[str] = ..., sessions: _Optional[_Mapping[str, int]] = ..., max_sessions: _Optional[int] = ..., sessions_created: _Optional[_Mapping[str, int]] = ..., sessions_closed: _Optional[_Mapping[str, int]] = ..., pool: _Optional[_Iterable[_Union[PoolProfileStats, _Mapping]]] = ..., calls_per_second: _Optional[float] = ..., calls_total: _Optional[int] = ..., errors: _Optional[_Mapping[str, int]] = ..., healthy: _Optional[bool] = ...) -> None: ...

class AdminListSessionsRequest(_message.Message):
    __slots__ = ("tenant", "usage")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    usage: bool
    def __init__(self, tenant: _Optional[str] = ..., usage: _Optional[bool] = ...) -> None: ...

class AdminSession(_message.Message):
    __slots__ = ("session", "last_tool", "last_used_at", "active_calls", "cpu_seconds", "memory_bytes")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    LAST_TOOL_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_AT_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_CALLS_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    session: Session
    last_tool: str
    last_used_at: float
    active_calls: int
    cpu_seconds: float
    memory_bytes: int
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ..., last_tool: _Optional[str] = ..., last_used_at: _Optional[float] = ..., active_calls: _Optional[int] = ..., cpu_seconds: _Optional[float] = ..., memory_bytes: _Optional[int] = ...) -> None: ...

class AdminListSessionsResponse(_message.Message):
    __slots__ = ("sessions",)
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[AdminSession]
    def __init__(self, sessions: _Optional[_Iterable[_Union[AdminSession, _Mapping]]] = ...) -> None: ...

class SnapshotSessionRequest(_message.Message):
    __slots__ = ("session_id", "label", "include_tmp")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_TMP_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    label: str
    include_tmp: bool
    def __init__(self, session_id: _Optional[str] = ..., label: _Optional[str] = ..., include_tmp: _Optional[bool] = ...) -> None: ...

class Snapshot(_message.Message):
    __slots__ = ("id", "session_id", "label", "created_at", "expires_at", "bytes", "files")
    ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    id: str
    session_id: str
    label: str
    created_at: float
    expires_at: float
    bytes: int
    files: int
    def __init__(self, id: _Optional[str] = ..., session_id: _Optional[str] = ..., label: _Optional[str] = ..., created_at: _Optional[float] = ..., expires_at: _Optional[float] = ..., bytes: _Optional[int] = ..., files: _Optional[int] = ...) -> None: ...

class ForkSessionRequest(_message.Message):
    __slots__ = ("session_id", "snapshot_id", "count")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    snapshot_id: str
    count: int
    def __init__(self, session_id: _Optional[str] = ..., snapshot_id: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class ForkSessionResponse(_message.Message):
    __slots__ = ("sessions",)
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[Session]
    def __init__(self, sessions: _Optional[_Iterable[_Union[Session, _Mapping]]] = ...) -> None: ...

class RestoreSessionRequest(_message.Message):
    __slots__ = ("session_id", "snapshot_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    snapshot_id: str
    def __init__(self, session_id: _Optional[str] = ..., snapshot_id: _Optional[str] = ...) -> None: ...

class RestoreSessionResponse(_message.Message):
    __slots__ = ("session", "stopped_process_ids", "stopped_other_processes")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    STOPPED_PROCESS_IDS_FIELD_NUMBER: _ClassVar[int]
    STOPPED_OTHER_PROCESSES_FIELD_NUMBER: _ClassVar[int]
    session: Session
    stopped_process_ids: _containers.RepeatedScalarFieldContainer[str]
    stopped_other_processes: int
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ..., stopped_process_ids: _Optional[_Iterable[str]] = ..., stopped_other_processes: _Optional[int] = ...) -> None: ...

class ListSnapshotsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSnapshotsResponse(_message.Message):
    __slots__ = ("snapshots",)
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    snapshots: _containers.RepeatedCompositeFieldContainer[Snapshot]
    def __init__(self, snapshots: _Optional[_Iterable[_Union[Snapshot, _Mapping]]] = ...) -> None: ...

class DeleteSnapshotRequest(_message.Message):
    __slots__ = ("snapshot_id",)
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    def __init__(self, snapshot_id: _Optional[str] = ...) -> None: ...

class DeleteSnapshotResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TerminalSize(_message.Message):
    __slots__ = ("rows", "cols")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    rows: int
    cols: int
    def __init__(self, rows: _Optional[int] = ..., cols: _Optional[int] = ...) -> None: ...

class ExecStart(_message.Message):
    __slots__ = ("session_id", "argv", "command", "cwd", "env", "user", "timeout_s", "tty", "size", "stdin_open", "output_cap_bytes", "exec_id")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    TTY_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    STDIN_OPEN_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_CAP_BYTES_FIELD_NUMBER: _ClassVar[int]
    EXEC_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    argv: _containers.RepeatedScalarFieldContainer[str]
    command: str
    cwd: str
    env: _containers.ScalarMap[str, str]
    user: str
    timeout_s: float
    tty: bool
    size: TerminalSize
    stdin_open: bool
    output_cap_bytes: int
    exec_id: str
    def __init__(self, session_id: _Optional[str] = ..., argv: _Optional[_Iterable[str]] = ..., command: _Optional[str] = ..., cwd: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., user: _Optional[str] = ..., timeout_s: _Optional[float] = ..., tty: _Optional[bool] = ..., size: _Optional[_Union[TerminalSize, _Mapping]] = ..., stdin_open: _Optional[bool] = ..., output_cap_bytes: _Optional[int] = ..., exec_id: _Optional[str] = ...) -> None: ...

class ExecRequest(_message.Message):
    __slots__ = ("start", "stdin", "stdin_eof", "resize", "signal")
    START_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    STDIN_EOF_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    start: ExecStart
    stdin: bytes
    stdin_eof: bool
    resize: TerminalSize
    signal: str
    def __init__(self, start: _Optional[_Union[ExecStart, _Mapping]] = ..., stdin: _Optional[bytes] = ..., stdin_eof: _Optional[bool] = ..., resize: _Optional[_Union[TerminalSize, _Mapping]] = ..., signal: _Optional[str] = ...) -> None: ...

class ExecStarted(_message.Message):
    __slots__ = ("exec_id", "pid")
    EXEC_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    exec_id: str
    pid: int
    def __init__(self, exec_id: _Optional[str] = ..., pid: _Optional[int] = ...) -> None: ...

class ExecExit(_message.Message):
    __slots__ = ("exit_code", "signal", "timed_out", "stdout_dropped_bytes", "stderr_dropped_bytes")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    STDOUT_DROPPED_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDERR_DROPPED_BYTES_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    signal: str
    timed_out: bool
    stdout_dropped_bytes: int
    stderr_dropped_bytes: int
    def __init__(self, exit_code: _Optional[int] = ..., signal: _Optional[str] = ..., timed_out: _Optional[bool] = ..., stdout_dropped_bytes: _Optional[int] = ..., stderr_dropped_bytes: _Optional[int] = ...) -> None: ...

class ExecEvent(_message.Message):
    __slots__ = ("started", "stdout", "stderr", "exit")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    started: ExecStarted
    stdout: bytes
    stderr: bytes
    exit: ExecExit
    def __init__(self, started: _Optional[_Union[ExecStarted, _Mapping]] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., exit: _Optional[_Union[ExecExit, _Mapping]] = ...) -> None: ...

class ReadFileRequest(_message.Message):
    __slots__ = ("session_id", "path", "user", "offset", "max_bytes")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    user: str
    offset: int
    max_bytes: int
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., user: _Optional[str] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class ReadFileChunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class WriteFileStart(_message.Message):
    __slots__ = ("session_id", "path", "user", "mode", "make_parents", "if_exists")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MAKE_PARENTS_FIELD_NUMBER: _ClassVar[int]
    IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    user: str
    mode: int
    make_parents: bool
    if_exists: str
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., user: _Optional[str] = ..., mode: _Optional[int] = ..., make_parents: _Optional[bool] = ..., if_exists: _Optional[str] = ...) -> None: ...

class WriteFileRequest(_message.Message):
    __slots__ = ("start", "data")
    START_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    start: WriteFileStart
    data: bytes
    def __init__(self, start: _Optional[_Union[WriteFileStart, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class WriteFileResponse(_message.Message):
    __slots__ = ("bytes",)
    BYTES_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    def __init__(self, bytes: _Optional[int] = ...) -> None: ...

class StatPathRequest(_message.Message):
    __slots__ = ("session_id", "path", "user")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    user: str
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., user: _Optional[str] = ...) -> None: ...

class PathInfo(_message.Message):
    __slots__ = ("exists", "type", "size", "mode", "mtime", "link_target")
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MTIME_FIELD_NUMBER: _ClassVar[int]
    LINK_TARGET_FIELD_NUMBER: _ClassVar[int]
    exists: bool
    type: str
    size: int
    mode: int
    mtime: float
    link_target: str
    def __init__(self, exists: _Optional[bool] = ..., type: _Optional[str] = ..., size: _Optional[int] = ..., mode: _Optional[int] = ..., mtime: _Optional[float] = ..., link_target: _Optional[str] = ...) -> None: ...
