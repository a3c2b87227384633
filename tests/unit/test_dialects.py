"""Dialects as pure functions: SDK-built calls in, SDK-validated shapes out."""

from __future__ import annotations

import base64
import json
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from runtime.core import default_registry
from runtime.dialects import gemini, images
from runtime.dialects.registry import DIALECTS, export_catalog, get_dialect, parse_message
from runtime.errors import TOOL_FAILURES, BadRequest, InvalidArguments
from runtime.models import ToolCall, ToolResult
from runtime.tools.base import Tool
from runtime.tools.registry import Registry
from tests import provider_types as sdk

COMMAND = {"command": "echo hi"}


def parse(dialect: str, message: Any) -> list[ToolCall]:
    return parse_message(dialect, json.dumps(message))


def test_anthropic_tool_use_blocks_from_an_sdk_message():
    message = sdk.anthropic_message(("toolu_1", "shell", COMMAND), ("toolu_2", "shell", {}))
    calls = parse("anthropic", message.model_dump())
    assert calls == [
        ToolCall("toolu_1", "shell", json.dumps(COMMAND)),
        ToolCall("toolu_2", "shell", "{}"),
    ]
    # The assistant message as a loop re-sends it (a MessageParam) parses too.
    param = {"role": "assistant", "content": message.model_dump()["content"]}
    assert parse("anthropic", param) == calls
    assert parse("anthropic", {"role": "assistant", "content": "just text"}) == []


def test_openai_chat_tool_calls_keep_the_arguments_text_verbatim():
    raw = '{"command": "ls",  "cwd": null}'
    calls = parse("openai", sdk.openai_message(("call_1", "shell", raw)).model_dump())
    assert calls == [ToolCall("call_1", "shell", raw)]
    no_tools = {"role": "assistant", "content": "done", "tool_calls": None}
    assert parse("openai", no_tools) == []


def test_openai_responses_ignores_reasoning_and_messages():
    output = [item.model_dump() for item in sdk.responses_output(("call_a", "shell", "{}"))]
    assert parse("openai-responses", output) == [ToolCall("call_a", "shell", "{}")]
    assert parse("openai-responses", {"id": "resp_1", "output": output}) == [
        ToolCall("call_a", "shell", "{}")
    ]


@pytest.mark.parametrize("dump", ["snake", "camel"])
def test_gemini_function_calls_in_either_spelling(dump):
    content = sdk.gemini_content(("fc_1", "shell", COMMAND))
    message = (
        content.model_dump()
        if dump == "snake"
        else content.model_dump(mode="json", by_alias=True, exclude_none=True)
    )
    assert parse("gemini", message) == [ToolCall("fc_1", "shell", json.dumps(COMMAND))]
    assert parse("gemini", {"content": message, "finishReason": "STOP"})[0].id == "fc_1"


def test_gemini_call_without_id_gets_one_and_its_response_has_none():
    content = sdk.gemini_content((None, "shell", COMMAND), (None, "shell", {}))
    calls = parse("gemini", content.model_dump())
    assert len({c.id for c in calls}) == 2
    assert all(c.id.startswith(gemini.GENERATED) for c in calls)
    rendered = gemini.render(calls, [ToolResult(c.id, {"exit_code": 0}) for c in calls])
    parsed = sdk.check_gemini_results(rendered)
    assert [p.function_response.id for p in parsed.parts] == [None, None]
    assert [p.function_response.name for p in parsed.parts] == ["shell", "shell"]


def test_mcp_tools_call_requests_single_and_batched():
    request = sdk.mcp_request(7, "shell", COMMAND)
    assert parse("mcp", request) == [ToolCall("7", "shell", json.dumps(COMMAND))]
    batch = [request, sdk.mcp_request("b", "shell", {})]
    assert [c.id for c in parse("mcp", batch)] == ["7", "b"]


def test_neutral_accepts_objects_and_text():
    message = [
        {"id": "1", "name": "shell", "arguments": COMMAND},
        {"id": "2", "name": "shell", "arguments": '{"command": "ls"}'},
        {"id": "3", "name": "shell", "arguments_json": "{}"},
    ]
    assert [c.arguments_json for c in parse("neutral", message)] == [
        json.dumps(COMMAND),
        '{"command": "ls"}',
        "{}",
    ]


# -- rendering: ok and failed results in each provider's own form -----------
CALLS = [ToolCall("c1", "shell", "{}"), ToolCall("c2", "nope", "{}")]
OK = ToolResult("c1", {"exit_code": 0, "stdout": "hi\n"}, duration_ms=3)
FAILED = ToolResult.failed(
    "c2", next(f for f in TOOL_FAILURES if f.code == "UNKNOWN_TOOL")("unknown tool 'nope'")
)
ERROR = {"error": {"code": "UNKNOWN_TOOL", "message": "unknown tool 'nope'"}}


def test_anthropic_results_are_one_user_message_with_is_error():
    rendered = get_dialect("anthropic").render(CALLS, [OK, FAILED])
    sdk.check_anthropic_results(rendered)
    ok, failed = rendered["content"]
    assert ok["tool_use_id"] == "c1" and json.loads(ok["content"]) == OK.output
    assert "is_error" not in ok
    assert failed["is_error"] is True and json.loads(failed["content"]) == ERROR


def test_openai_chat_results_are_tool_messages():
    rendered = get_dialect("openai").render(CALLS, [OK, FAILED])
    sdk.check_openai_results(rendered)
    assert [m["tool_call_id"] for m in rendered] == ["c1", "c2"]
    assert json.loads(rendered[1]["content"]) == ERROR


def test_openai_responses_results_are_function_call_outputs():
    rendered = get_dialect("openai-responses").render(CALLS, [OK, FAILED])
    sdk.check_responses_results(rendered)
    assert [i["call_id"] for i in rendered] == ["c1", "c2"]
    assert json.loads(rendered[0]["output"]) == OK.output


def test_gemini_results_are_one_user_content_of_function_responses():
    rendered = get_dialect("gemini").render(CALLS, [OK, FAILED])
    content = sdk.check_gemini_results(rendered)
    first, second = (p.function_response for p in content.parts)
    assert (first.id, first.name, first.response) == ("c1", "shell", {"output": OK.output})
    assert (second.id, second.name, second.response) == ("c2", "nope", ERROR)
    assert "functionResponse" in rendered["parts"][0]  # camelCase on the wire


def test_mcp_results_are_call_tool_results():
    ok, failed = sdk.check_mcp_results(get_dialect("mcp").render(CALLS, [OK, FAILED]))
    assert not ok.is_error and ok.structured_content == OK.output
    assert json.loads(ok.content[0].text) == OK.output
    assert failed.is_error and failed.structured_content == ERROR


def test_a_failure_keeps_the_output_so_far():
    timeout = next(f for f in TOOL_FAILURES if f.code == "TIMEOUT")("too slow", {"stdout": "x"})
    result = ToolResult.failed("c1", timeout)
    rendered = get_dialect("openai").render(CALLS[:1], [result])
    assert json.loads(rendered[0]["content"])["output"] == {"stdout": "x"}


def test_render_refuses_results_that_do_not_pair_with_the_calls():
    with pytest.raises(ValueError, match="one to one"):
        get_dialect("openai").render(CALLS, [FAILED, OK])


# -- catalogs ---------------------------------------------------------------
class Mode(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["fast", "slow"] = Field(description="How to run.")
    depth: int | None = Field(None, ge=0)


class RichArgs(BaseModel):
    """Every shape a tool schema may take: nesting, lists, enums, maps, $defs."""

    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="A path.")
    paths: list[str] | None = Field(None, description="More paths.", max_length=10)
    mode: Mode | None = None
    modes: list[Mode] = Field(default_factory=list)
    labels: dict[str, str] | None = None
    flag: bool = False


async def _never(ctx: Any, args: Any) -> dict[str, Any]:
    raise AssertionError


RICH = Tool(name="rich", description="A test tool.", arguments=RichArgs, run=_never)


def catalogs() -> list[Any]:
    return [default_registry().catalog(), Registry([RICH]).catalog()]


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
@pytest.mark.parametrize("catalog", catalogs(), ids=["default", "rich"])
def test_every_exported_catalog_is_what_the_sdk_accepts(dialect, catalog):
    sdk.check_catalog(dialect, json.loads(export_catalog(dialect, catalog)))


def walk(node: Any) -> Any:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk(item)


@pytest.mark.parametrize("catalog", catalogs(), ids=["default", "rich"])
def test_openai_catalogs_are_strict(catalog):
    for dialect in ("openai", "openai-responses"):
        tools = json.loads(export_catalog(dialect, catalog))
        for tool in tools:
            spec = tool.get("function", tool)
            assert spec["strict"] is True
            for node in walk(spec["parameters"]):
                assert not {"title", "default", "$ref", "$defs"} & set(node)
                if node.get("type") == "object" or "object" in node.get("type", []):
                    assert node["additionalProperties"] is False
                    assert node["required"] == list(node["properties"])


def test_strict_optional_properties_are_nullable_and_null_means_absent():
    tools = json.loads(export_catalog("openai", default_registry().catalog()))
    (tool,) = [t for t in tools if t["function"]["name"] == "shell"]
    props = tool["function"]["parameters"]["properties"]
    assert props["command"]["type"] == "string"
    assert props["cwd"]["type"] == ["string", "null"]
    assert "env" not in props  # a free-form map cannot be strict
    # What a strict model then sends validates: nulls are absent.
    _, args = default_registry().parse("shell", '{"command": "ls", "cwd": null, "timeout_s": null}')
    assert args.cwd is None  # type: ignore[attr-defined]
    rich = json.loads(export_catalog("openai", Registry([RICH]).catalog()))[0]
    mode = rich["function"]["parameters"]["properties"]["mode"]
    assert {"type": "null"} in mode["anyOf"]
    assert mode["anyOf"][0]["properties"]["depth"]["type"] == ["integer", "null"]


def test_gemini_schema_uses_only_its_subset():
    (tools,) = json.loads(export_catalog("gemini", Registry([RICH]).catalog()))
    params = tools["functionDeclarations"][0]["parameters"]
    for node in walk(params):
        forbidden = {"anyOf", "additionalProperties", "title", "default", "$ref", "$defs"}
        assert not forbidden & set(node)
    assert params["properties"]["mode"]["nullable"] is True
    assert params["properties"]["mode"]["properties"]["kind"]["enum"] == ["fast", "slow"]
    assert "labels" not in params["properties"]
    assert params["required"] == ["path"]


def test_unknown_dialect_lists_the_known_ones():
    with pytest.raises(BadRequest, match="known: neutral, openai, openai-responses, anthropic"):
        export_catalog("claude", [])
    assert json.loads(export_catalog("", [])) == []


# -- every way a provider message can be malformed --------------------------
MALFORMED = [
    ("anthropic", "{", "not valid JSON"),
    ("anthropic", [], "message_json/: expected an object, got array"),
    ("anthropic", {"content": 5}, "/content: expected an array, got number"),
    ("anthropic", {"content": ["x"]}, "/content/0: expected an object, got string"),
    ("anthropic", {"content": [{"type": "tool_use", "name": "shell"}]}, "/content/0/id"),
    ("anthropic", {"content": [{"type": "tool_use", "id": "t", "name": ""}]}, "/content/0/name"),
    (
        "anthropic",
        {"content": [{"type": "tool_use", "id": "t", "name": "shell", "input": "ls"}]},
        "/content/0/input: expected an object, got string",
    ),
    ("openai", "null", "message_json/: expected an object, got null"),
    ("openai", {"tool_calls": {}}, "/tool_calls: expected an array, got object"),
    ("openai", {"tool_calls": [3]}, "/tool_calls/0: expected an object, got number"),
    (
        "openai",
        {"tool_calls": [{"id": "c", "type": "custom", "custom": {}}]},
        "/tool_calls/0/type",
    ),
    ("openai", {"tool_calls": [{"id": "c", "type": "function"}]}, "/tool_calls/0/function"),
    (
        "openai",
        {"tool_calls": [{"id": 5, "function": {"name": "shell", "arguments": "{}"}}]},
        "/tool_calls/0/id: expected a non-empty string, got number",
    ),
    (
        "openai",
        {"tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]},
        "/tool_calls/0/function/name",
    ),
    (
        "openai",
        {"tool_calls": [{"id": "c", "function": {"name": "shell", "arguments": {}}}]},
        "/tool_calls/0/function/arguments: expected a string of JSON, got object",
    ),
    ("openai-responses", 5, "message_json/: expected an array, got number"),
    ("openai-responses", {"output": None}, "/output: expected an array, got null"),
    ("openai-responses", [None], "/0: expected an object, got null"),
    ("openai-responses", [{"type": "function_call", "name": "shell"}], "/0/call_id"),
    ("openai-responses", [{"type": "function_call", "call_id": "c"}], "/0/name"),
    (
        "openai-responses",
        [{"type": "function_call", "call_id": "c", "name": "shell"}],
        "/0/arguments: expected a string of JSON, got null",
    ),
    ("gemini", "[]", "message_json/: expected an object, got array"),
    ("gemini", {"parts": "x"}, "/parts: expected an array, got string"),
    ("gemini", {"parts": [1]}, "/parts/0: expected an object, got number"),
    ("gemini", {"parts": [{"functionCall": "shell"}]}, "/parts/0/functionCall: expected an"),
    ("gemini", {"parts": [{"function_call": {"args": {}}}]}, "/parts/0/function_call/name"),
    ("gemini", {"parts": [{"functionCall": {"name": "shell", "id": 3}}]}, "/functionCall/id"),
    (
        "gemini",
        {"content": {"parts": [{"functionCall": {"name": "shell", "args": []}}]}},
        "/content/parts/0/functionCall/args: expected an object, got array",
    ),
    ("mcp", [1], "message_json/0: expected an object, got number"),
    ("mcp", {"method": "tools/list", "id": 1}, '/method: expected "tools/call"'),
    ("mcp", {"method": "tools/call", "params": {"name": "shell"}}, "/id: expected a JSON-RPC id"),
    ("mcp", {"method": "tools/call", "id": True, "params": {"name": "shell"}}, "/id"),
    ("mcp", {"method": "tools/call", "id": "", "params": {"name": "shell"}}, "/id"),
    ("mcp", {"method": "tools/call", "id": 1}, "/params: expected an object, got null"),
    ("mcp", {"method": "tools/call", "id": 1, "params": {}}, "/params/name"),
    (
        "mcp",
        {"method": "tools/call", "id": 1, "params": {"name": "shell", "arguments": [1]}},
        "/params/arguments: expected an object, got array",
    ),
    ("neutral", {}, "message_json/: expected an array, got object"),
    ("neutral", [[]], "/0: expected an object, got array"),
    ("neutral", [{"name": "shell"}], "/0/id"),
    ("neutral", [{"id": "1"}], "/0/name"),
    ("neutral", [{"id": "1", "name": "shell", "arguments_json": {}}], "/0/arguments_json"),
    ("neutral", [{"id": "1", "name": "shell", "arguments": 3}], "/0/arguments"),
    ("gpt", [], "unknown dialect 'gpt'; known: neutral"),
]


@pytest.mark.parametrize(("dialect", "message", "expected"), MALFORMED)
def test_malformed_messages_name_the_offending_path(dialect, message, expected):
    text = message if isinstance(message, str) else json.dumps(message)
    with pytest.raises(BadRequest) as caught:
        parse_message(dialect, text)
    assert expected in str(caught.value)
    assert caught.value.status.name == "INVALID_ARGUMENT"


def test_what_the_model_wrote_is_not_judged_by_the_parser():
    """Bad arguments parse fine; the registry refuses them inside the result."""
    message = {"tool_calls": [{"id": "c", "function": {"name": "shell", "arguments": "{ls"}}]}
    (call,) = parse("openai", message)
    with pytest.raises(InvalidArguments, match="not valid JSON"):
        default_registry().parse(call.name, call.arguments_json)
    anthropic = sdk.anthropic_message(("t", "shell", {"command": 5})).model_dump()
    (call,) = parse("anthropic", anthropic)
    with pytest.raises(InvalidArguments, match="/command"):
        default_registry().parse(call.name, call.arguments_json)


def test_provider_fields_toolrt_does_not_use_are_ignored():
    block = {"type": "tool_use", "id": "t", "name": "shell", "input": {}, "caller": None}
    block |= {"toolset_name": "x", "cache_control": {"type": "ephemeral"}}
    other = {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    message = {"role": "assistant", "content": [thinking, other, block], "stop_reason": "x"}
    assert parse("anthropic", message) == [ToolCall("t", "shell", "{}")]
    part = {"functionCall": {"name": "shell", "id": "g"}, "thoughtSignature": "abc"}
    assert parse("gemini", {"parts": [part, {"text": "x"}]}) == [ToolCall("g", "shell", "{}")]


class MapArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    headers: dict[str, str] = Field(description="Required free-form map.")


def test_a_tool_that_cannot_be_strict_is_exported_loose():
    tool = Tool(name="maps", description="Needs a map.", arguments=MapArgs, run=_never)
    (exported,) = json.loads(export_catalog("openai", Registry([tool]).catalog()))
    assert exported["function"]["strict"] is False
    assert exported["function"]["parameters"]["properties"]["headers"]["type"] == "object"
    sdk.check_catalog("openai", [exported])
    (gemini_tools,) = json.loads(export_catalog("gemini", Registry([tool]).catalog()))
    headers = gemini_tools["functionDeclarations"][0]["parameters"]["properties"]["headers"]
    assert headers["type"] == "OBJECT"  # kept, being required


# -- images (the python tool's figures) --------------------------------------
PNG_DATA = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 92).decode()  # 100 bytes
FIGURE = ToolResult(
    "c1", {"stdout": "", "outputs": [{"type": "image/png", "data": PNG_DATA}]}, duration_ms=3
)
PY_CALLS = [ToolCall("c1", "python", "{}")]


def test_images_travel_as_image_parts_where_the_dialect_takes_them():
    anthropic = get_dialect("anthropic").render(PY_CALLS, [FIGURE])
    sdk.check_anthropic_results(anthropic)
    text, image = anthropic["content"][0]["content"]
    assert image["source"] == {"type": "base64", "media_type": "image/png", "data": PNG_DATA}
    shown = json.loads(text["text"])["outputs"][0]["data"]
    assert shown == "[PNG image, 100 bytes: attached as image 1]"

    [responses] = get_dialect("openai-responses").render(PY_CALLS, [FIGURE])
    sdk.check_responses_results([responses])
    assert responses["output"][1] == {
        "type": "input_image",
        "image_url": f"data:image/png;base64,{PNG_DATA}",
    }

    content = sdk.check_gemini_results(get_dialect("gemini").render(PY_CALLS, [FIGURE]))
    [part] = content.parts[0].function_response.parts
    assert part.inline_data.mime_type == "image/png"
    assert part.inline_data.data == base64.b64decode(PNG_DATA)

    [mcp] = sdk.check_mcp_results(get_dialect("mcp").render(PY_CALLS, [FIGURE]))
    assert mcp.content[1].type == "image" and mcp.content[1].data == PNG_DATA
    assert mcp.structured_content == FIGURE.output  # the image stays in the structured copy


def test_openai_chat_says_each_image_in_a_line():
    [message] = get_dialect("openai").render(PY_CALLS, [FIGURE])
    sdk.check_openai_results([message])
    assert PNG_DATA not in message["content"]
    assert message["content"].splitlines()[-1].startswith("image 1: a 100-byte PNG, in output_json")


def test_images_past_the_caps_stay_notes():
    many = [{"type": "image/png", "data": PNG_DATA}] * (images.MAX_IMAGES + 1)
    result = ToolResult("c1", {"outputs": many}, duration_ms=1)
    rendered = get_dialect("anthropic").render(PY_CALLS, [result])
    blocks = rendered["content"][0]["content"]
    assert len(blocks) == 1 + images.MAX_IMAGES
    assert "not attached" in json.loads(blocks[0]["text"])["outputs"][-1]["data"]
