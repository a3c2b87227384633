"""inspect's `eval` of tasks whose model (inspect's `mockllm`, scripted) runs
`bash` in a `toolrt` sandbox, and the docs' example as written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from docs_page import blocks, run_example
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, get_model
from inspect_ai.model._providers.mockllm import MockLLM
from inspect_ai.scorer import Score, Target, accuracy, scorer
from inspect_ai.solver import TaskState, generate, use_tools
from inspect_ai.tool import bash
from inspect_ai.util import sandbox

from runtime.integrations.inspect import ToolrtSandboxConfig


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """mockllm counts tokens with a tokenizer it would download: a rough count
    instead. eval's logs go to a temporary directory, its display nowhere."""

    async def count_text_tokens(self: MockLLM, text: str) -> int:
        return len(text) // 4

    monkeypatch.setattr(MockLLM, "count_text_tokens", count_text_tokens)
    monkeypatch.setenv("INSPECT_DISPLAY", "none")
    monkeypatch.chdir(tmp_path)


@scorer(metrics=[accuracy()])
def file_written() -> Any:
    """Correct when the bash call left its answer in the sample's sandbox."""

    async def score(state: TaskState, target: Target) -> Score:
        answer = await sandbox().read_file("answer.txt")
        return Score(value=1 if answer.strip() == target.text else 0, answer=answer)

    return score


def test_an_eval_runs_the_models_bash_calls_in_toolrt() -> None:
    outputs = [
        ModelOutput.for_tool_call(
            "mockllm/model", "bash", {"command": "uname -s > answer.txt; id -un"}
        ),
        ModelOutput.from_content("mockllm/model", "Done."),
    ]
    task = Task(
        dataset=[Sample(input="Write the kernel's name to answer.txt", target="Linux")],
        solver=[use_tools(bash(timeout=60)), generate()],
        scorer=file_written(),
        sandbox=("toolrt", ToolrtSandboxConfig()),
    )
    model = get_model("mockllm/model", custom_outputs=outputs)
    [log] = eval(task, model=model)
    assert log.status == "success", log.error
    assert log.results is not None
    assert log.results.scores[0].metrics["accuracy"].value == 1
    [sample] = log.samples or []
    [tool_message] = [m for m in sample.messages if m.role == "tool"]
    assert tool_message.text.strip() == "sandbox"


def test_the_docs_example(capsys: pytest.CaptureFixture[str]) -> None:
    [example] = blocks("inspect_ai", "python")
    outputs = [
        ModelOutput.for_tool_call("mockllm/model", "bash", {"command": "uname -s"}),
        ModelOutput.from_content("mockllm/model", "The kernel is Linux."),
    ]
    out = run_example(example, get_model("mockllm/model", custom_outputs=outputs), capsys)
    assert out == "success 1.0\n"
