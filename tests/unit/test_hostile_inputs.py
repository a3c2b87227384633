"""Inputs the fuzz tests (tests/docker/test_fuzz_*.py) found answered with
INTERNAL, UNKNOWN or a misleading status, each pinned to its documented
answer. The local backend runs the real agent, so the kernel's own limits
(ENAMETOOLONG, E2BIG) are the ones a Docker sandbox has."""

from __future__ import annotations

import io
import json
import tarfile

import grpc
import pytest

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import ToolrtRpcError
from runtime.config import Limits
from runtime.tools.validation import MAX_ARG_STRLEN, MAX_COMMAND_BYTES
from tests.helpers import make_tar


@pytest.fixture
def sandbox_backend() -> str:
    return "local"


LONG_NAME = "/workspace/" + "a" * 5000
# Short names, but 5,000+ bytes in all.
MANY_PARTS = "/workspace" + "/d" * 2500


@pytest.mark.parametrize("path", [LONG_NAME, MANY_PARTS], ids=["long-name", "many-components"])
@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("read_file", {}, "path"),
        ("write_file", {"content": "x"}, "path"),
        ("edit_file", {"old_string": "a", "new_string": "b"}, "path"),
        ("list_files", {"recursive": True}, "path"),
        ("run_tests", {}, "path"),
        ("shell", {"command": "pwd"}, "cwd"),
    ],
)
def test_a_path_over_the_kernels_limits_is_invalid_arguments(session, tool, arguments, field, path):
    result = session.call(tool, {**arguments, field: path})
    assert result.error_code == "INVALID_ARGUMENTS", result
    assert f"/{field} " in result.error_message
    assert "at most 255 bytes" in result.error_message or "at most 4095" in result.error_message


def test_a_download_of_an_over_long_path_names_the_limit(session):
    # Transfers check no length of their own: the agent's answer reaches the client.
    with pytest.raises(ToolrtRpcError) as refused:
        session.download([LONG_NAME])
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "INVALID_ARGUMENTS" in refused.value.details and "name too long" in refused.value.details


def test_a_file_name_of_multibyte_characters_up_to_the_limit_can_be_written(session):
    name = "/workspace/" + "😀" * 63  # 252 bytes: its temporary name must fit too
    written = session.call("write_file", {"path": name, "content": "fits\n"})
    assert written.ok, written
    assert session.call("read_file", {"path": name}).output["content"] == "fits\n"


def test_arguments_too_large_for_the_agent_protocol_are_invalid_arguments(session):
    env = {f"V{i}": "x" * 100_000 for i in range(12)}  # each fits, together > 1 MiB
    result = session.call("shell", {"command": "true", "env": env})
    assert result.error_code == "INVALID_ARGUMENTS", result
    assert "too large for the sandbox's agent" in result.error_message
    with pytest.raises(ToolrtRpcError) as refused:
        session.download(["/workspace"] * 100_000)
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "too large" in refused.value.details
    assert session.shell("true").ok


def test_a_command_line_is_held_to_the_kernels_limit_on_one_argument(session):
    longest = "true #" + "x" * (MAX_COMMAND_BYTES - 6)
    assert session.shell(longest).ok
    refused = session.shell(longest + "x")
    assert refused.error_code == "INVALID_ARGUMENTS", refused
    assert "/command" in refused.error_message and f"at most {MAX_COMMAND_BYTES}" in (
        refused.error_message
    )
    args = ["-k", "x" * MAX_COMMAND_BYTES]
    tests = session.call("run_tests", {"args": args})
    assert tests.error_code == "INVALID_ARGUMENTS" and "/args" in tests.error_message, tests


def test_an_environment_variable_is_held_to_the_kernels_limit(session):
    value = "x" * (MAX_ARG_STRLEN - 1 - len("BIG="))  # NAME=value and its NUL: the limit
    ran = session.shell('echo "${#BIG}"', env={"BIG": value})
    assert ran.ok and ran.output["stdout"] == f"{len(value)}\n", ran
    refused = session.shell("true", env={"BIG": value + "x"})
    assert refused.error_code == "INVALID_ARGUMENTS", refused
    assert "/env" in refused.error_message and "'BIG'" in refused.error_message


def test_a_session_environment_variable_over_the_limit_is_refused_at_creation(client):
    with pytest.raises(ToolrtRpcError) as refused:
        client.create_session(env={"BIG": "x" * MAX_ARG_STRLEN})
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "BIG" in refused.value.details and "bytes per variable" in refused.value.details
    assert client.list_sessions() == []


def test_a_tree_deeper_than_the_agents_stack_lists_as_truncated(session):
    made = session.shell("mkdir -p " + "d/" * 1100)
    assert made.ok and made.output["exit_code"] == 0, made
    listing = session.call("list_files", {"path": "/workspace", "recursive": True})
    assert listing.ok, listing
    assert listing.output["truncated"] is True
    assert listing.output["entries"][0]["path"] == "/workspace/d"


def test_an_archive_member_deeper_than_the_agents_stack_unpacks_and_leaves_no_staging(session):
    deep = "x/" * 1200 + "f"
    assert session.upload(make_tar((deep, "file", "deep\n"))) == (1, 5)
    assert session.upload(make_tar((deep, "file", "again\n"))) == (1, 6)
    listed = session.shell("ls -A /workspace; cat /workspace/" + deep)
    assert listed.output["stdout"] == "x\nagain\n", listed


def test_a_download_of_a_tree_deeper_than_a_stack_would_hold_arrives_whole(session):
    assert session.shell("mkdir -p /workspace/" + "d/" * 1100 + " && touch " + "d/" * 1100 + "f").ok
    with tarfile.open(fileobj=io.BytesIO(session.download(["/workspace"]))) as tar:
        names = tar.getnames()
    assert "workspace/" + "d/" * 1100 + "f" in names
    assert session.shell("true").ok


def test_less_cpu_than_the_engine_can_enforce_gets_the_least_it_can():
    asked = Limits.model_validate(dict.fromkeys(Limits.model_fields, 0) | {"cpus": 1e-9})
    merged = asked.merged_over(Limits(), Limits())
    assert merged.cpus == 0.1
    unlimited = Limits(cpus=0).merged_over(Limits(cpus=0), Limits(cpus=2))
    assert unlimited.cpus == 0  # 0 is the operator's "no CPU limit", kept as it is


LONE = "<lone>"  # replaced in the JSON text by an escape of half a surrogate pair


def with_lone_surrogates(message: object) -> str:
    return json.dumps(message).replace(LONE, "\\udc80")


@pytest.mark.parametrize(
    ("dialect", "message"),
    [
        ("neutral", [{"id": f"c{LONE}", "name": "shell", "arguments": {}}]),
        ("neutral", [{"id": "c", "name": f"shell{LONE}", "arguments": {}}]),
        ("openai", {"tool_calls": [{"id": LONE, "function": {"name": "shell", "arguments": ""}}]}),
        ("anthropic", {"content": [{"type": "tool_use", "id": LONE, "name": "x", "input": {}}]}),
        ("gemini", {"parts": [{"functionCall": {"name": "shell", "id": LONE}}]}),
        ("mcp", {"method": "tools/call", "id": LONE, "params": {"name": "shell"}}),
    ],
)
def test_a_lone_surrogate_in_a_call_id_or_name_is_invalid_argument(session, dialect, message):
    text = with_lone_surrogates(message)
    with pytest.raises(ToolrtRpcError) as refused:
        session.execute_message(dialect, text)
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "lone surrogate" in refused.value.details and "tool call 0" in refused.value.details


def test_a_lone_surrogate_in_parsed_arguments_is_that_calls_invalid_arguments(session):
    message = [
        {"id": "value", "name": "shell", "arguments": {"command": f"x{LONE}"}},
        {"id": "key", "name": "shell", "arguments": {"command": "true", f"k{LONE}": 1}},
        {"id": "fine", "name": "shell", "arguments": {"command": "echo fine"}},
    ]
    rendered, results = session.execute_message("neutral", with_lone_surrogates(message))
    assert [r.error_code for r in results] == ["INVALID_ARGUMENTS", "INVALID_ARGUMENTS", ""]
    assert "/command: contains a lone surrogate" in results[0].error_message
    assert "lone surrogate" in results[1].error_message
    assert rendered[2]["output"]["stdout"] == "fine\n"


def test_a_status_quoting_a_huge_argument_keeps_its_code(client):
    with pytest.raises(ToolrtRpcError) as missing:
        client.get_session("é" * 100_000)
    assert missing.value.code == grpc.StatusCode.NOT_FOUND
    assert len(missing.value.details.encode()) < 1200
    assert "bytes left out" in missing.value.details


def identity(data: bytes) -> bytes:
    return data


# A string field holding bytes that are not UTF-8, for field number 1 and 2.
BAD_UTF8 = b"\x0a\x02\xff\xfe"
SERVICE = "/toolruntime.v1.ToolRuntime/"


@pytest.mark.parametrize(
    ("method", "kind", "data"),
    [
        (SERVICE + "GetSession", "unary_unary", BAD_UTF8),
        (SERVICE + "CreateSession", "unary_unary", b"\x12\x05\x08"),  # a cut length
        (SERVICE + "ListTools", "unary_unary", b"\xff\xff\xff"),  # no such tag
        (SERVICE + "ExecuteStream", "unary_stream", BAD_UTF8),
        (SERVICE + "DownloadFiles", "unary_stream", b"\x12\x01\x80"),
        (SERVICE + "UploadFiles", "stream_unary", BAD_UTF8),
        ("/grpc.health.v1.Health/Check", "unary_unary", BAD_UTF8),
        (
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            "stream_stream",
            BAD_UTF8,
        ),
    ],
)
def test_undecodable_request_bytes_are_invalid_argument(client, method, kind, data):
    """grpcio answers UNKNOWN (unary requests) or lets the error reach the
    handler (client streams) when a request does not decode; toolrt says
    INVALID_ARGUMENT, for its own service and for health and reflection."""
    stub = getattr(client.channel, kind)(
        method, request_serializer=identity, response_deserializer=identity
    )

    def call() -> object:
        answer = stub(iter([data]) if kind.startswith("stream") else data, timeout=30)
        return list(answer) if kind.endswith("stream") else answer

    with pytest.raises(grpc.RpcError) as refused:
        call()
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    assert "could not be decoded" in refused.value.details()
    # The same channel and daemon go on serving well-formed requests.
    assert json.loads(client.stub.ListTools(pb.ListToolsRequest()).tools_json)


def test_a_number_past_64_bits_is_invalid_arguments_not_internal(session):
    # The schema takes any integer; the agent's fields are 64-bit.
    result = session.call("read_file", {"path": "/workspace", "limit": 1 << 63})
    assert result.error_code == "INVALID_ARGUMENTS", result
    assert session.shell("true").ok
