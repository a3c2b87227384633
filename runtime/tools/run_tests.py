"""`run_tests`: pytest in the sandbox, results read from its JUnit XML."""

from __future__ import annotations

import posixpath
import shlex
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runtime import cpu
from runtime.agent import protocol
from runtime.agent.redact import Redactor
from runtime.constants import WORKSPACE
from runtime.errors import CallTimeout, FileMissing, InvalidArguments, LimitExceeded
from runtime.tools.base import Tool, ToolContext
from runtime.tools.network import NO_NETWORK
from runtime.tools.paths import checked_path
from runtime.tools.shell import command_env, shell_output
from runtime.tools.validation import command_too_long, no_nul

# The report is read whole (up to this size, some 300,000 cases) but a piece
# at a time, off the event loop, dropping each case once counted.
MAX_XML_BYTES = 16 << 20
XML_PIECE_BYTES = 64 << 10
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


def _message(problem: ET.Element, redactor: Redactor) -> str:
    text = problem.get("message") or (problem.text or "").strip().splitlines()[-1:]
    # Parsing unescaped the report (`&lt;` is `<` again): redacted once more,
    # before the cut below could leave a piece of a secret.
    message = redactor.redact_text(text if isinstance(text, str) else "".join(text))
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 3] + "..."
    return message


class _Report:
    """What a JUnit report says, gathered from its parser's events."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self.counts = {"tests": 0, "failed": 0, "errors": 0, "skipped": 0}
        self.failures: list[dict[str, str]] = []
        # Open elements, outermost first, each with whether it is a counted
        # suite; and how many of those are open.
        self.open: list[tuple[ET.Element, bool]] = []
        self.in_suites = 0

    def take(self, events: Iterator[Any]) -> None:
        """Handle the (event, element) pairs of a parser with events start and end."""
        for event, element in events:
            if event == "start":
                self.start(element)
            else:
                self.end(element)

    def start(self, element: ET.Element) -> None:
        # The suites counted are the root, or the root's children (xunit's
        # <testsuites>); cases count anywhere inside them.
        root = self.open[0][0] if self.open else None
        counted = element.tag == "testsuite" and (
            root is None or (len(self.open) == 1 and root.tag != "testsuite")
        )
        if counted:
            self.counts["tests"] += int(element.get("tests", 0))
            self.counts["failed"] += int(element.get("failures", 0))
            self.counts["errors"] += int(element.get("errors", 0))
            self.counts["skipped"] += int(element.get("skipped", 0))
            self.in_suites += 1
        self.open.append((element, counted))

    def end(self, element: ET.Element) -> None:
        _, counted = self.open.pop()
        self.in_suites -= counted
        if element.tag != "testcase":
            return
        if self.in_suites:
            for problem in (*element.findall("failure"), *element.findall("error")):
                if len(self.failures) < MAX_FAILURES:
                    test_id = self.redactor.redact_text(_test_id(element))
                    message = _message(problem, self.redactor)
                    self.failures.append({"test_id": test_id, "message": message})
        # Read and done with: the case leaves the tree (it is its parent's last child).
        if self.open:
            del self.open[-1][0][-1]


def parse_junit(xml_text: bytes, redactor: Redactor | None = None) -> dict[str, Any]:
    """Counts and failures of a pytest JUnit XML report.

    Fed to the parser a piece at a time, so a thread running this lets go of
    the GIL between pieces, and each case is dropped once read: neither time
    on the event loop nor memory grows with the number of cases.
    """
    parser: ET.XMLPullParser[Any] = ET.XMLPullParser(events=("start", "end"))
    report = _Report(redactor or Redactor())
    for start in range(0, len(xml_text), XML_PIECE_BYTES):
        parser.feed(xml_text[start : start + XML_PIECE_BYTES])
        report.take(parser.read_events())
    parser.close()
    report.take(parser.read_events())
    counts = report.counts
    # pytest counts a test that fails and then errors in teardown in both.
    passed = counts["tests"] - counts["failed"] - counts["errors"] - counts["skipped"]
    return {
        "passed": max(0, passed),
        "failed": counts["failed"],
        "errors": counts["errors"],
        "skipped": counts["skipped"],
        "failures": report.failures,
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
    env = command_env(ctx.env, None)
    request = protocol.Exec(
        command=command,
        cwd=cwd,
        env=env,
        spare_env=env,
        call_id=ctx.call_id,
        resume=ctx.resume,
        timeout_s=ctx.limits.call_timeout_s,
        grace_s=ctx.kill_grace_s,
        output_cap=ctx.limits.output_cap_bytes,
        merge_output=True,
    )
    result, body = await ctx.agent.exec(request)
    console = shell_output(result, body, ctx.redactor)["stdout"][-CONSOLE_TAIL_CHARS:]
    try:
        _, xml_text = await ctx.agent.read(
            protocol.Read(path=report, raw=True, max_bytes=MAX_XML_BYTES)
        )
        await ctx.agent.unlink(report)
    except FileMissing:
        xml_text = b""
    results: dict[str, Any] = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failures": []}
    if xml_text:
        try:
            results = await cpu.compute(len(xml_text), parse_junit, xml_text, ctx.redactor)
        except (ET.ParseError, ValueError):
            # Not a report pytest wrote (a plugin broke it): the console says more.
            xml_text = b""
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
    resumable=True,
)
