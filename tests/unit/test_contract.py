"""The contract outside clients rely on: every RPC served, every error mapped."""

from __future__ import annotations

import inspect

import grpc

from runtime import errors
from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime._proto.toolruntime.v1 import runtime_pb2_grpc as pb_grpc
from runtime.core import default_registry
from runtime.server.service import ToolRuntimeService

DESIGN_RPCS = {
    "CreateSession",
    "GetSession",
    "ListSessions",
    "CloseSession",
    "ListTools",
    "Execute",
    "ExecuteBatch",
    "ExecuteStream",
    "Exec",
    "ReadFile",
    "WriteFile",
    "StatPath",
}
# DESIGN's default catalog ("Tools"), as clients and model prompts name it.
DESIGN_TOOLS = {
    "shell",
    "process_list",
    "process_output",
    "process_input",
    "process_kill",
    "read_file",
    "write_file",
    "edit_file",
    "list_files",
    "run_tests",
    "workspace_diff",
    "python",
}
DESIGN_TOOL_CODES = {
    "UNKNOWN_TOOL",
    "INVALID_ARGUMENTS",
    "PATH_DENIED",
    "NOT_FOUND",
    "TIMEOUT",
    "LIMIT_EXCEEDED",
    "BUDGET_EXHAUSTED",
    "SANDBOX_LOST",
    "OUTCOME_UNKNOWN",
    "EXECUTION_ERROR",
    "INTERNAL",
}


def test_the_default_catalog_has_designs_tools():
    assert set(default_registry().names()) == DESIGN_TOOLS


def test_every_rpc_of_the_proto_is_implemented():
    service = pb.DESCRIPTOR.services_by_name["ToolRuntime"]
    declared = {method.name for method in service.methods}
    assert declared >= DESIGN_RPCS
    for name in declared:
        implemented = getattr(ToolRuntimeService, name)
        assert implemented is not getattr(pb_grpc.ToolRuntimeServicer, name), name
        assert inspect.iscoroutinefunction(implemented) or inspect.isasyncgenfunction(
            implemented
        ), name


def test_design_field_names_are_in_the_proto():
    fields = {
        name: {f.name for f in msg.fields}
        for name, msg in pb.DESCRIPTOR.message_types_by_name.items()
    }
    assert {
        "image",
        "limits",
        "allowlist",
        "env",
        "ttl_seconds",
        "idle_seconds",
        "labels",
        "workspace_tar",
    } <= fields["CreateSessionRequest"]
    assert {"id", "state", "image", "limits", "allowlist", "created_at", "expires_at"} <= fields[
        "Session"
    ]
    assert {
        "memory_bytes",
        "cpus",
        "pids",
        "workspace_bytes",
        "tmp_bytes",
        "call_timeout_s",
        "max_calls",
        "output_cap_bytes",
    } <= fields["Limits"]
    assert {"read_roots", "write_roots", "deny_globs"} <= fields["Allowlist"]
    assert {"id", "name", "arguments_json"} <= fields["ToolCall"]
    assert {"call_id", "ok", "output_json", "error", "duration_ms"} <= fields["ToolResult"]
    assert {"code", "message", "retryable"} <= fields["ToolError"]
    assert {"stdout", "stderr", "result"} <= fields["ExecuteEvent"]
    # Programs: exec and files (round 3).
    assert {"start", "stdin", "stdin_eof", "resize", "signal"} <= fields["ExecRequest"]
    assert {
        "session_id",
        "argv",
        "command",
        "cwd",
        "env",
        "user",
        "timeout_s",
        "tty",
        "size",
        "stdin_open",
        "output_cap_bytes",
        "exec_id",
    } <= fields["ExecStart"]
    assert {"started", "stdout", "stderr", "exit"} <= fields["ExecEvent"]
    assert {"exec_id", "pid"} <= fields["ExecStarted"]
    assert {
        "exit_code",
        "signal",
        "timed_out",
        "stdout_dropped_bytes",
        "stderr_dropped_bytes",
    } <= fields["ExecExit"]
    assert {"session_id", "path", "user", "offset", "max_bytes"} <= fields["ReadFileRequest"]
    assert {"data"} <= fields["ReadFileChunk"]
    assert {"start", "data"} <= fields["WriteFileRequest"]
    assert {"session_id", "path", "user", "mode", "make_parents", "if_exists"} <= fields[
        "WriteFileStart"
    ]
    assert {"session_id", "path", "user"} <= fields["StatPathRequest"]
    assert {"exists", "type", "size", "mode", "mtime", "link_target"} <= fields["PathInfo"]


def declared_below(base: type) -> set[type]:
    """Every class in runtime.errors derived from `base` (not base itself)."""
    return {
        obj
        for obj in vars(errors).values()
        if inspect.isclass(obj) and issubclass(obj, base) and obj is not base
    }


def test_every_tool_failure_has_a_design_code_and_every_code_a_class():
    codes = {cls.code for cls in errors.TOOL_FAILURES}
    assert codes == DESIGN_TOOL_CODES
    assert declared_below(errors.ToolFailure) == set(errors.TOOL_FAILURES)


def test_every_request_error_maps_to_a_grpc_status():
    declared = declared_below(errors.RequestError)
    assert declared == set(errors.REQUEST_ERRORS)
    # A ProgramError's status is its reason's.
    statuses = {cls.status for cls in declared - {errors.ProgramError}}
    statuses |= set(errors.ProgramError.STATUSES.values())
    assert statuses == {
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    }


# DESIGN "Programs: exec and files": every ErrorInfo reason and its status
# (FILE_EXISTS, for WriteFile's if_exists "fail", is this version's addition).
DESIGN_REASONS = {
    "SESSION_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "FILE_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "IS_A_DIRECTORY": grpc.StatusCode.FAILED_PRECONDITION,
    "NOT_A_DIRECTORY": grpc.StatusCode.FAILED_PRECONDITION,
    "PERMISSION_DENIED": grpc.StatusCode.PERMISSION_DENIED,
    "USER_NOT_ALLOWED": grpc.StatusCode.PERMISSION_DENIED,
    "FILE_TOO_LARGE": grpc.StatusCode.OUT_OF_RANGE,
    "NO_SPACE": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "QUOTA_EXCEEDED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "TIMEOUT": grpc.StatusCode.DEADLINE_EXCEEDED,
    "SANDBOX_LOST": grpc.StatusCode.FAILED_PRECONDITION,
    "UNAUTHENTICATED": grpc.StatusCode.UNAUTHENTICATED,
    "INVALID_REQUEST": grpc.StatusCode.INVALID_ARGUMENT,
    "FILE_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
}


def test_every_error_reason_of_design_has_its_status():
    found = {
        cls.error_reason: cls.status
        for cls in errors.REQUEST_ERRORS
        if cls.error_reason and cls is not errors.ProgramError
    }
    found.update(errors.ProgramError.STATUSES)
    assert found == DESIGN_REASONS


def test_client_package_exports_are_complete():
    import runtime.client as client

    public = {n for n, o in vars(client).items() if not n.startswith("_") and inspect.isclass(o)}
    assert public <= set(client.__all__)
