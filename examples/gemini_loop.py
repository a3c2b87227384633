"""A minimal Gemini agent loop whose tools run in a toolrt sandbox.

    GEMINI_API_KEY=... python examples/gemini_loop.py "your task"
    python examples/gemini_loop.py --replay     # offline: a recorded transcript

toolrt takes the candidate's content (the SDK's snake_case dump works) and
answers with the `user` Content of `functionResponse` parts to append.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google import genai
from google.genai import types

from runtime.client import Client, SessionHandle

try:
    from examples import _story
except ImportError:  # run as a script
    import _story  # type: ignore[no-redef]

Create = Callable[..., types.GenerateContentResponse]


def agent_loop(session: SessionHandle, create: Create, task: str) -> list[Any]:
    config = {"tools": session.client.list_tools("gemini"), "system_instruction": _story.SYSTEM}
    contents: list[Any] = [{"role": "user", "parts": [{"text": task}]}]
    while True:
        content = create(contents=contents, config=config).candidates[0].content
        contents.append(content)  # as is: keeps thought signatures intact
        if not any(part.function_call for part in content.parts or []):
            return contents
        results, _ = session.execute_message("gemini", content.model_dump(mode="json"))
        contents.append(results)


def replay() -> Create:
    """A stand-in for `models.generate_content` that plays the recorded turns."""
    script = [
        types.Content(
            role="model",
            parts=[
                types.Part(function_call=types.FunctionCall(id=f"fc_{i}", name=n, args=a))
                for i, n, a in turn
            ],
        )
        for turn in _story.TURNS
    ]
    script.append(types.Content(role="model", parts=[types.Part(text=_story.FINAL)]))

    def create(**request: Any) -> types.GenerateContentResponse:
        for content in request["contents"]:
            types.Content.model_validate(content)
        types.GenerateContentConfig.model_validate(request["config"])
        candidate = types.Candidate(content=script.pop(0), finish_reason="STOP")
        return types.GenerateContentResponse(candidates=[candidate])

    return create


def main() -> None:
    args = _story.arguments("GEMINI_API_KEY")
    if args.replay:
        create = replay()
    else:
        api = genai.Client()

        def create(**request: Any) -> types.GenerateContentResponse:
            return api.models.generate_content(model="gemini-2.5-flash", **request)

    with Client(args.target) as client, client.session() as session:
        contents = agent_loop(session, create, args.task)
    print("".join(part.text or "" for part in contents[-1].parts or []))


if __name__ == "__main__":
    main()
