"""A minimal OpenAI (Chat Completions) agent loop whose tools run in a toolrt sandbox.

    OPENAI_API_KEY=... python examples/openai_loop.py "your task"
    python examples/openai_loop.py --replay     # offline: a recorded transcript

The catalog is strict (`strict: true`); toolrt takes the assistant message as
is and answers with the `tool` messages to append.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
)
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_function_tool_call import Function
from pydantic import TypeAdapter

from runtime.client import Client, SessionHandle

try:
    from examples import _story
except ImportError:  # run as a script
    import _story  # type: ignore[no-redef]

Create = Callable[..., ChatCompletion]


def agent_loop(session: SessionHandle, create: Create, task: str) -> list[Any]:
    tools = session.client.list_tools("openai")
    messages: list[Any] = [
        {"role": "system", "content": _story.SYSTEM},
        {"role": "user", "content": task},
    ]
    while True:
        message = create(messages=messages, tools=tools).choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return messages
        results, _ = session.execute_message("openai", message.model_dump())
        messages.extend(results)


def replay() -> Create:
    """A stand-in for `chat.completions.create` that plays the recorded turns."""
    script = [
        ChatCompletionMessage(
            role="assistant",
            content=None,
            tool_calls=[
                ChatCompletionMessageFunctionToolCall(
                    id=f"call_{i}",
                    type="function",
                    function=Function(name=n, arguments=json.dumps(a)),
                )
                for i, n, a in turn
            ],
        )
        for turn in _story.TURNS
    ]
    script.append(ChatCompletionMessage(role="assistant", content=_story.FINAL))

    def create(**request: Any) -> ChatCompletion:
        TypeAdapter(list[ChatCompletionMessageParam]).validate_python(request["messages"])
        message = script.pop(0)
        finish = "tool_calls" if message.tool_calls else "stop"
        choice = Choice(index=0, message=message, finish_reason=finish, logprobs=None)
        return ChatCompletion(
            id="chatcmpl-replay",
            object="chat.completion",
            created=0,
            model="replay",
            choices=[choice],
        )

    return create


def main() -> None:
    args = _story.arguments("OPENAI_API_KEY")
    if args.replay:
        create = replay()
    else:
        api = openai.OpenAI()

        def create(**request: Any) -> ChatCompletion:
            return api.chat.completions.create(model="gpt-4.1", **request)

    with Client(args.target) as client, client.session() as session:
        messages = agent_loop(session, create, args.task)
    print(messages[-1]["content"])


if __name__ == "__main__":
    main()
