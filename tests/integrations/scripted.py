"""Scripted stand-ins for a model: the harnesses' loops run, nothing is asked of a model API."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

# mini-swe-agent's own deterministic model and its message helper.
from minisweagent.models import test_models as mini_models

DeterministicModel = mini_models.DeterministicModel
make_output = mini_models.make_output


class ScriptedChatModel(GenericFakeChatModel):
    """LangChain's fake chat model, with the `bind_tools` an agent needs."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self


def tool_call(name: str, n: int, **args: Any) -> AIMessage:
    """An assistant message calling one tool (id `call_<n>`)."""
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{n}"}])
