"""A minimal Anthropic agent loop whose tools run in a toolrt sandbox.

    ANTHROPIC_API_KEY=... python examples/anthropic_loop.py "your task"
    python examples/anthropic_loop.py --replay     # offline: a recorded transcript

toolrt takes the model's message as is and answers with the `user` message of
`tool_result` blocks to append: no translation in the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
from anthropic.types import Message, MessageParam, TextBlock, ToolUseBlock, Usage
from pydantic import TypeAdapter

from runtime.client import Client, SessionHandle

try:
    from examples import _story
except ImportError:  # run as a script
    import _story  # type: ignore[no-redef]

Create = Callable[..., Message]


def agent_loop(session: SessionHandle, create: Create, task: str) -> list[Any]:
    tools = session.client.list_tools("anthropic")
    messages: list[Any] = [{"role": "user", "content": task}]
    while True:
        response = create(system=_story.SYSTEM, messages=messages, tools=tools)
        content = [block.model_dump(exclude_none=True) for block in response.content]
        messages.append({"role": "assistant", "content": content})
        if response.stop_reason != "tool_use":
            return messages
        results, _ = session.execute_message("anthropic", response.model_dump())
        messages.append(results)


def replay() -> Create:
    """A stand-in for `messages.create` that plays the recorded turns."""
    script = [
        [ToolUseBlock(type="tool_use", id=f"toolu_{i}", name=n, input=a) for i, n, a in turn]
        for turn in _story.TURNS
    ]
    script.append([TextBlock(type="text", text=_story.FINAL)])

    def create(**request: Any) -> Message:
        # What the real API would receive must be valid for it.
        TypeAdapter(list[MessageParam]).validate_python(request["messages"])
        content = script.pop(0)
        return Message(
            id="msg_replay",
            type="message",
            role="assistant",
            model="replay",
            content=content,
            stop_reason="tool_use" if script else "end_turn",
            stop_sequence=None,
            usage=Usage(input_tokens=0, output_tokens=0),
        )

    return create


def main() -> None:
    args = _story.arguments("ANTHROPIC_API_KEY")
    if args.replay:
        create = replay()
    else:
        api = anthropic.Anthropic()

        def create(**request: Any) -> Message:
            return api.messages.create(model="claude-sonnet-4-5", max_tokens=4096, **request)

    with Client(args.target) as client, client.session() as session:
        messages = agent_loop(session, create, args.task)
    print(messages[-1]["content"][-1]["text"])


if __name__ == "__main__":
    main()
