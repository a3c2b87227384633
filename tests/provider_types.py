"""Provider SDK objects and type checks shared by the dialect tests.

Tool calls are built as the providers' own SDK objects and dumped the way an
agent loop would; rendered results and catalogs are checked against the
SDKs' own param/result types, never against toolrt's idea of them.
"""

from __future__ import annotations

import json
from typing import Any, get_type_hints

import anthropic.types as anthropic_types
import mcp_types
from google.genai import types as genai_types
from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionToolMessageParam,
)
from openai.types.chat.chat_completion_message_function_tool_call import Function
from openai.types.responses import (
    FunctionToolParam,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_input_param import FunctionCallOutput
from pydantic import TypeAdapter


def typed(kind: Any, value: Any) -> Any:
    """Validate against a TypedDict and refuse keys it does not declare."""
    TypeAdapter(kind).validate_python(value)
    unknown = set(value) - set(get_type_hints(kind))
    assert not unknown, f"{kind.__name__} has no {sorted(unknown)}"
    return value


# -- tool calls as each provider's SDK writes them ----------------------------
def anthropic_message(*calls: tuple[str, str, dict[str, Any]], text: str = "On it.") -> Any:
    content: list[Any] = [anthropic_types.TextBlock(type="text", text=text, citations=None)]
    content += [
        anthropic_types.ToolUseBlock(type="tool_use", id=i, name=n, input=args)
        for i, n, args in calls
    ]
    return anthropic_types.Message(
        id="msg_01",
        type="message",
        role="assistant",
        model="claude-sonnet-4-5",
        content=content,
        stop_reason="tool_use",
        stop_sequence=None,
        usage=anthropic_types.Usage(input_tokens=10, output_tokens=20),
    )


def openai_message(*calls: tuple[str, str, str]) -> Any:
    return ChatCompletionMessage(
        role="assistant",
        content=None,
        tool_calls=[
            ChatCompletionMessageFunctionToolCall(
                id=i, type="function", function=Function(name=n, arguments=args)
            )
            for i, n, args in calls
        ],
    )


def responses_output(*calls: tuple[str, str, str]) -> list[Any]:
    items: list[Any] = [ResponseReasoningItem(id="rs_1", type="reasoning", summary=[])]
    items.append(
        ResponseOutputMessage(
            id="msg_1",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text="Running.", annotations=[])],
        )
    )
    items += [
        ResponseFunctionToolCall(
            type="function_call", id=f"fc_{i}", call_id=i, name=n, arguments=a, status="completed"
        )
        for i, n, a in calls
    ]
    return items


def gemini_content(*calls: tuple[str | None, str, dict[str, Any]]) -> Any:
    parts = [genai_types.Part(text="Let me check.")]
    parts += [
        genai_types.Part(function_call=genai_types.FunctionCall(id=i, name=n, args=args))
        for i, n, args in calls
    ]
    return genai_types.Content(role="model", parts=parts)


def mcp_request(request_id: int | str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    request = mcp_types.CallToolRequest(
        params=mcp_types.CallToolRequestParams(name=name, arguments=arguments)
    )
    return {"jsonrpc": "2.0", "id": request_id, **request.model_dump(by_alias=True, mode="json")}


# -- checks against each SDK's result types ----------------------------------
def check_anthropic_results(rendered: Any) -> None:
    TypeAdapter(anthropic_types.MessageParam).validate_python(rendered)
    assert rendered["role"] == "user"
    for block in rendered["content"]:
        typed(anthropic_types.ToolResultBlockParam, block)


def check_openai_results(rendered: Any) -> None:
    for message in rendered:
        typed(ChatCompletionToolMessageParam, message)


def check_responses_results(rendered: Any) -> None:
    for item in rendered:
        typed(FunctionCallOutput, item)


def check_gemini_results(rendered: Any) -> Any:
    content = genai_types.Content.model_validate(rendered)  # extra="forbid"
    assert content.role == "user"
    assert content.parts and all(p.function_response for p in content.parts)
    return content


def check_mcp_results(rendered: Any) -> list[Any]:
    return [mcp_types.CallToolResult.model_validate(r) for r in rendered]


# -- catalogs against each SDK's tool types ---------------------------------
def check_catalog(dialect: str, tools: Any) -> None:
    if dialect == "openai":
        for tool in tools:
            typed(ChatCompletionFunctionToolParam, tool)
            typed(openai_function_definition(), tool["function"])
    elif dialect == "openai-responses":
        for tool in tools:
            typed(FunctionToolParam, tool)
    elif dialect == "anthropic":
        for tool in tools:
            typed(anthropic_types.ToolParam, tool)
    elif dialect == "gemini":
        assert len(tools) == 1
        genai_types.Tool.model_validate(tools[0])
        genai_types.GenerateContentConfig(tools=[genai_types.Tool.model_validate(tools[0])])
    elif dialect == "mcp":
        for tool in tools:
            mcp_types.Tool.model_validate(tool)
            assert tool["inputSchema"]["type"] == "object"
    json.dumps(tools)


def openai_function_definition() -> Any:
    from openai.types.shared_params import FunctionDefinition

    return FunctionDefinition
