"""`run_tests`: pytest in the sandbox, results read from its JUnit XML."""

from __future__ import annotations

import posixpath
import shlex
import uuid
import xml.etree.ElementTree as ET
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runtime.agent import protocol
from runtime.constants import WORKSPACE
from runtime.errors import CallTimeout, FileMissing, InvalidArguments, LimitExceeded
from runtime.tools.base import Tool, ToolContext
from runtime.tools.files import NO_NETWORK, checked_path
from runtime.tools.shell import command_env, shell_output
from runtime.tools.validation import command_too_long, no_nul

MAX_XML_BYTES = 16 << 20
MAX_FAILURES = 100
MAX_MESSAGE_CHARS = 2000
CONSOLE_TAIL_CHARS = 4000


class RunTestsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(
        None, description="Test file or directory to run. Default: /workspace."
    )
    args: list[str] | None = Field(
        None,
        max_length=64,
        description='Extra pytest arguments, e.g. ["-k", "parser", "-x"].',
    )

    _text = field_validator("path", "args")(no_nul)


def _test_id(case: ET.Element) -> str:
    """pytest's node id, rebuilt from xunit1's file + classname + name."""
    name = case.get("name", "")
    classname = case.get("classname", "")
    file = case.get("file", "")
    if not file:
        return f"{classname}::{name}" if classname else name
    module = file[:-3].replace("/", ".") if file.endswith(".py") else file
    classes = classname[len(module) + 1 :] if classname.startswith(module + ".") else ""
    parts = [file, *[c for c in classes.split(".") if c], name]
    return "::".join(parts)


def _message(problem: ET.Element) -> str:
    text = problem.get("message") or (problem.text or "").strip().splitlines()[-1:]
    message = text if isinstance(text, str) else "".join(text)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 3] + "..."
    return message


def parse_junit(xml_text: bytes) -> dict[str, Any]:
    """Counts and failures of a pytest JUnit XML report."""
    root = ET.fromstring(xml_text)
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    counts = {"tests": 0, "failed": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        counts["tests"] += int(suite.get("tests", 0))
        counts["failed"] += int(suite.get("failures", 0))
        counts["errors"] += int(suite.get("errors", 0))
        counts["skipped"] += int(suite.get("skipped", 0))
    failures: list[dict[str, str]] = []
    for suite in suites:
        for case in suite.iter("testcase"):
            for problem in (*case.findall("failure"), *case.findall("error")):
                if len(failures) < MAX_FAILURES:
                    failures.append({"test_id": _test_id(case), "message": _message(problem)})
    # pytest counts a test that fails and then errors in teardown in both.
    passed = counts["tests"] - counts["failed"] - counts["errors"] - counts["skipped"]
    return {
        "passed": max(0, passed),
        "failed": counts["failed"],
        "errors": counts["errors"],
        "skipped": counts["skipped"],
        "failures": failures,
    }


async def run_tests(ctx: ToolContext, args: RunTestsArgs) -> dict[str, Any]:
    resolved, kind = await checked_path(ctx, args.path or WORKSPACE)
    if not kind:
        msg = f"{resolved}: no such file or directory"
        raise FileMissing(msg)
    cwd = resolved if kind == "dir" else posixpath.dirname(resolved)
    report = f"/tmp/.toolrt-junit-{uuid.uuid4().hex}.xml"
    argv = [
        "python3",
        "-m",
        "pytest",
        "-o",
        "junit_family=xunit1",
        f"--junitxml={report}",
        resolved,
        *(args.args or []),
    ]
    command = "exec " + shlex.join(argv)
    problem = command_too_long(command)
    if problem:
        msg = f"/args: the pytest command line {problem}; pass fewer or shorter arguments"
        raise InvalidArguments(msg)
    request = protocol.Exec(
        command=command,
        cwd=cwd,
        env=command_env(ctx.env, None),
        call_id=ctx.call_id,
        timeout_s=ctx.limits.call_timeout_s,
        grace_s=ctx.kill_grace_s,
        output_cap=ctx.limits.output_cap_bytes,
        merge_output=True,
    )
    result, body = await ctx.agent.exec(request)
    console = shell_output(result, body)["stdout"][-CONSOLE_TAIL_CHARS:]
    try:
        _, xml_text = await ctx.agent.read(
            protocol.Read(path=report, raw=True, max_bytes=MAX_XML_BYTES)
        )
        await ctx.agent.unlink(report)
    except FileMissing:
        xml_text = b""
    results: dict[str, Any] = (
        parse_junit(xml_text)
        if xml_text
        else {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failures": []}
    )
    output = {**results, "exit_code": result.exit_code, "duration_ms": result.duration_ms}
    # Exit codes 0 (all passed) and 1 (some failed) are fully told by the
    # counts; anything else (usage error, nothing collected, crash) needs
    # pytest's own words.
    if result.exit_code not in (0, 1) or not xml_text:
        output["output"] = console
    if result.oom:
        output["output"] = console
        msg = f"the test run ran out of memory (session limit {ctx.limits.memory_bytes} bytes)"
        raise LimitExceeded(msg, output)
    if result.killed == "deadline":
        output["output"] = console
        msg = f"the test run did not finish within {ctx.limits.call_timeout_s:g} s and was killed"
        raise CallTimeout(msg, output)
    return output


RUN_TESTS = Tool(
    name="run_tests",
    description=f"""\
Run the project's tests with pytest and get structured results: counts of \
passed, failed, errors and skipped tests, and for each failure its test id \
(file::Class::test) and message.

Use it after a change to check your work, instead of running pytest through \
shell and reading the console. `path` narrows the run to a file or \
directory (default /workspace); `args` passes extra pytest options (e.g. \
["-k", "name", "-x"]). Failing tests are a normal result (ok), not an error: \
read the failures and fix the code. When pytest cannot run at all (usage \
error, no tests collected) `output` holds the end of its console output. \
Limited by the session's call timeout. {NO_NETWORK}""",
    arguments=RunTestsArgs,
    run=run_tests,
)
