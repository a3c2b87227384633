"""Every error toolrt raises, and what it becomes at the edge.

    ToolrtError
    ├── ConfigurationError       the daemon refuses to start, saying which setting
    ├── ToolFailure              → ToolResult.error.code (for the model)
    │   ├── UnknownTool          UNKNOWN_TOOL
    │   ├── InvalidArguments     INVALID_ARGUMENTS
    │   ├── PathDenied           PATH_DENIED
    │   ├── FileMissing          NOT_FOUND
    │   ├── CallTimeout          TIMEOUT
    │   ├── LimitExceeded        LIMIT_EXCEEDED
    │   ├── BudgetExhausted      BUDGET_EXHAUSTED
    │   ├── SandboxLost          SANDBOX_LOST
    │   ├── OutcomeUnknown       OUTCOME_UNKNOWN
    │   ├── ExecutionError       EXECUTION_ERROR (the python tool's code raised)
    │   └── InternalFailure      INTERNAL
    └── RequestError             → gRPC status (for the agent loop)
        ├── Unauthenticated      UNAUTHENTICATED
        ├── PermissionDenied     PERMISSION_DENIED
        ├── SessionNotFound      NOT_FOUND
        ├── SnapshotNotFound     NOT_FOUND (worded alike for another tenant's and an expired one)
        ├── BadRequest           INVALID_ARGUMENT
        ├── SessionUnusable      FAILED_PRECONDITION
        ├── HoldsSecret          FAILED_PRECONDITION (a snapshot of files holding a secret value)
        ├── NotBoundedHere       FAILED_PRECONDITION (a writable root its runtime cannot bound)
        ├── AdmissionRefused     RESOURCE_EXHAUSTED
        │   ├── RateLimited      RESOURCE_EXHAUSTED (the wait in the message)
        │   ├── ShareExhausted   RESOURCE_EXHAUSTED (a tenant's share of a shared resource)
        │   └── SnapshotRefused  RESOURCE_EXHAUSTED (the quota's config key in `quota`)
        ├── ProgramError         the status of its reason (a program's exec or file RPC)
        ├── EngineUnavailable    UNAVAILABLE
        ├── AuditUnavailable     UNAVAILABLE (the audit log cannot be written)
        ├── StateUnavailable     UNAVAILABLE (the state database cannot be written)
        └── DaemonStopping       UNAVAILABLE (shutdown = "keep": retry the same call id)

Tool failures travel inside a ToolResult; request errors end the RPC. Only
`server.interceptor` turns request errors into status codes, and only
`sandbox.docker.errors` turns Docker's errors into ours. A request error
with an `error_reason` also carries google.rpc.ErrorInfo{domain: "toolrt",
reason} in its status details (DESIGN's reasons), for programs to tell
cases apart without parsing a message.
"""

from __future__ import annotations

from typing import Any, ClassVar

import grpc


class ToolrtError(Exception):
    """Base of every error toolrt raises on purpose."""


class ConfigurationError(ToolrtError):
    """The daemon cannot start with this configuration; the message names the setting."""


class ToolFailure(ToolrtError):
    """A tool call failed in a way the model should read and adapt to."""

    code: ClassVar[str] = "INTERNAL"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, output: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        # What the call produced before it failed (for example the output of
        # a command that timed out): always a JSON object.
        self.output: dict[str, Any] = output or {}


class UnknownTool(ToolFailure):
    code = "UNKNOWN_TOOL"


class InvalidArguments(ToolFailure):
    code = "INVALID_ARGUMENTS"


class PathDenied(ToolFailure):
    code = "PATH_DENIED"


class FileMissing(ToolFailure):
    code = "NOT_FOUND"


class CallTimeout(ToolFailure):
    code = "TIMEOUT"
    retryable = True


class LimitExceeded(ToolFailure):
    code = "LIMIT_EXCEEDED"


class BudgetExhausted(ToolFailure):
    code = "BUDGET_EXHAUSTED"


class SandboxLost(ToolFailure):
    code = "SANDBOX_LOST"


class OutcomeUnknown(ToolFailure):
    code = "OUTCOME_UNKNOWN"


class ExecutionError(ToolFailure):
    """The code the python tool ran raised an exception (output_json.error says which)."""

    code = "EXECUTION_ERROR"


class InternalFailure(ToolFailure):
    code = "INTERNAL"


TOOL_FAILURES: tuple[type[ToolFailure], ...] = (
    UnknownTool,
    InvalidArguments,
    PathDenied,
    FileMissing,
    CallTimeout,
    LimitExceeded,
    BudgetExhausted,
    SandboxLost,
    OutcomeUnknown,
    ExecutionError,
    InternalFailure,
)


class RequestError(ToolrtError):
    """The request itself cannot be served; becomes a gRPC status."""

    # Class attributes, set per instance only by ProgramError.
    status: grpc.StatusCode = grpc.StatusCode.INTERNAL
    # The ErrorInfo reason its status carries ("": none).
    error_reason: str = ""


class Unauthenticated(RequestError):
    """No credentials, or credentials that name no principal (the message says which)."""

    status = grpc.StatusCode.UNAUTHENTICATED
    error_reason = "UNAUTHENTICATED"

    def __init__(self, message: str, reason: str = "invalid") -> None:
        super().__init__(message)
        # One word for counting refusals: missing, malformed, wrong, certificate.
        self.reason = reason


class PermissionDenied(RequestError):
    """The principal may not use what it asked for (an image, a runtime, tools at all)."""

    status = grpc.StatusCode.PERMISSION_DENIED
    error_reason = "PERMISSION_DENIED"


class SessionNotFound(RequestError):
    status = grpc.StatusCode.NOT_FOUND
    error_reason = "SESSION_NOT_FOUND"


class SnapshotNotFound(RequestError):
    status = grpc.StatusCode.NOT_FOUND


class BadRequest(RequestError):
    status = grpc.StatusCode.INVALID_ARGUMENT
    error_reason = "INVALID_REQUEST"


class SessionUnusable(RequestError):
    """A non-tool RPC (an upload, a download) found the session's sandbox lost.

    The message starts with SANDBOX_LOST and says why; the session is closed.
    """

    status = grpc.StatusCode.FAILED_PRECONDITION
    error_reason = "SANDBOX_LOST"


class HoldsSecret(RequestError):
    """What would be stored (a snapshot's names, link targets or contents)
    holds a value of the session's secrets: refused, never rewritten."""

    status = grpc.StatusCode.FAILED_PRECONDITION


class NotBoundedHere(RequestError):
    """What the request asks for is granted, but this runtime cannot bound it
    (a writable root filesystem outside runsc-overlay); the message says why."""

    status = grpc.StatusCode.FAILED_PRECONDITION


class AdmissionRefused(RequestError):
    status = grpc.StatusCode.RESOURCE_EXHAUSTED
    error_reason = "QUOTA_EXCEEDED"


class RateLimited(AdmissionRefused):
    """A tenant's calls per second are spent; `retry_after_s` says for how long."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ShareExhausted(AdmissionRefused):
    """A tenant (or session) holds its share of what every tenant shares
    (`[shares]`); `share` names it in `toolrt_share_refusals_total{share}`."""

    def __init__(self, message: str, share: str) -> None:
        super().__init__(message)
        self.share = share


class SnapshotRefused(AdmissionRefused):
    """A snapshot does not fit its tenant's share or the state disk; `quota`
    is the config key that refused it (the metric's label)."""

    def __init__(self, message: str, quota: str) -> None:
        super().__init__(message)
        self.quota = quota


class ProgramError(RequestError):
    """A program's exec or file RPC refused for one of DESIGN's reasons
    (FILE_NOT_FOUND, IS_A_DIRECTORY, ...); its status is the reason's."""

    STATUSES: ClassVar[dict[str, grpc.StatusCode]] = {
        "FILE_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
        "IS_A_DIRECTORY": grpc.StatusCode.FAILED_PRECONDITION,
        "NOT_A_DIRECTORY": grpc.StatusCode.FAILED_PRECONDITION,
        "PERMISSION_DENIED": grpc.StatusCode.PERMISSION_DENIED,
        "USER_NOT_ALLOWED": grpc.StatusCode.PERMISSION_DENIED,
        "FILE_TOO_LARGE": grpc.StatusCode.OUT_OF_RANGE,
        "FILE_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
        "NO_SPACE": grpc.StatusCode.RESOURCE_EXHAUSTED,
        "QUOTA_EXCEEDED": grpc.StatusCode.RESOURCE_EXHAUSTED,
        "TIMEOUT": grpc.StatusCode.DEADLINE_EXCEEDED,
        "SANDBOX_LOST": grpc.StatusCode.FAILED_PRECONDITION,
        "INVALID_REQUEST": grpc.StatusCode.INVALID_ARGUMENT,
    }

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        if reason not in self.STATUSES:
            msg = f"{reason}: not a program error reason"
            raise ValueError(msg)
        self.error_reason = reason
        self.status = self.STATUSES[reason]


class EngineUnavailable(RequestError):
    status = grpc.StatusCode.UNAVAILABLE


class AuditUnavailable(RequestError):
    """The audit log cannot be written: nothing that must be recorded runs meanwhile."""

    status = grpc.StatusCode.UNAVAILABLE


class StateUnavailable(RequestError):
    """The state database cannot be written: no new work is accepted meanwhile,
    since its outcome could not be kept across a restart."""

    status = grpc.StatusCode.UNAVAILABLE


class DaemonStopping(RequestError):
    """The daemon stops and keeps its sessions: the call runs on in the sandbox
    and a retry with the same call id (after the restart) gets its result."""

    status = grpc.StatusCode.UNAVAILABLE


REQUEST_ERRORS: tuple[type[RequestError], ...] = (
    Unauthenticated,
    PermissionDenied,
    SessionNotFound,
    SnapshotNotFound,
    BadRequest,
    SessionUnusable,
    HoldsSecret,
    NotBoundedHere,
    AdmissionRefused,
    RateLimited,
    ShareExhausted,
    SnapshotRefused,
    ProgramError,
    EngineUnavailable,
    AuditUnavailable,
    StateUnavailable,
    DaemonStopping,
)
