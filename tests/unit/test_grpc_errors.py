"""The error contract through gRPC without an engine: tool failures are
ToolResult codes for the model, malformed requests are gRPC statuses."""

from __future__ import annotations

import grpc
import pytest

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import ToolrtRpcError


@pytest.fixture(params=["local", "local-static", "fake"])
def sandbox_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_unknown_tool_lists_the_available_ones(session):
    result = session.call("browser", {"url": "https://example.com"})
    assert result.error_code == "UNKNOWN_TOOL"
    assert "available tools: shell" in result.error_message
    assert result.output == {}


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ("{not json", "not valid JSON"),
        ("[1]", "object"),
        ({"command": 5}, "/command"),
        ({"command": "true", "bogus": 1}, "/bogus"),
        ({"command": "a\udcffb"}, "/command"),
    ],
)
def test_invalid_arguments_name_the_field(session, arguments, expected):
    result = session.call("shell", arguments)
    assert result.error_code == "INVALID_ARGUMENTS", result
    assert expected in result.error_message


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("read_file", {"path": "/etc/passwd"}),
        ("write_file", {"path": "/etc/evil", "content": "x"}),
        ("list_files", {"path": "/proc"}),
    ],
)
def test_paths_outside_the_allowlist_are_denied(session, tool, arguments):
    result = session.call(tool, arguments)
    assert result.error_code == "PATH_DENIED", result


def test_a_missing_file_is_not_found(session):
    for tool, arguments in [
        ("read_file", {"path": "missing.txt"}),
        ("edit_file", {"path": "missing.txt", "old_string": "a", "new_string": "b"}),
    ]:
        result = session.call(tool, arguments)
        assert result.error_code == "NOT_FOUND", result
        assert "/workspace/missing.txt" in result.error_message


def test_an_unknown_session_is_not_found(client):
    for call in (
        lambda: client.get_session("no-such-session"),
        lambda: client.close_session("no-such-session"),
        lambda: client.call("no-such-session", "shell", {"command": "true"}),
        lambda: client.execute_message("no-such-session", "neutral", []),
    ):
        with pytest.raises(ToolrtRpcError) as err:
            call()
        assert err.value.code == grpc.StatusCode.NOT_FOUND


def test_an_empty_call_id_is_invalid_argument(client, session):
    request = pb.ExecuteRequest(session_id=session.id, call=pb.ToolCall(name="shell"))
    with pytest.raises(grpc.RpcError) as err:
        client.stub.Execute(request)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert session.shell("true").ok  # and the session still serves
