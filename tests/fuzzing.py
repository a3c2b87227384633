"""Hostile inputs for the fuzz tests, and the checks every answer must pass.

DESIGN: no input a model or client can send may produce INTERNAL. The fuzz
tests (tests/docker/test_fuzz_*.py, marked `fuzz`) throw what this module
draws at the real daemon and hold every answer to the documented codes.

Budgets: `make test` runs each target with the small `examples(n)` it names,
derandomized (the same examples on every run, so CI is reproducible);
`make fuzz` sets TOOLRT_FUZZ_EXAMPLES and every target runs that many
examples, randomly seeded (Hypothesis prints how to reproduce a failure and
keeps failing examples in .hypothesis/ to replay them first next time).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import logging
import os
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import grpc
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import Client, SessionHandle
from runtime.core import default_registry
from runtime.errors import TOOL_FAILURES
from tests.helpers import containers_of

T = TypeVar("T")

# -- budgets -----------------------------------------------------------------
FUZZ_EXAMPLES = int(os.environ.get("TOOLRT_FUZZ_EXAMPLES") or 0)


def fuzz_settings(ci_examples: int) -> Callable[[T], T]:
    """Hypothesis settings of one fuzz target: `ci_examples` derandomized
    examples in `make test`, TOOLRT_FUZZ_EXAMPLES random ones in `make fuzz`."""
    return settings(  # type: ignore[return-value]
        max_examples=FUZZ_EXAMPLES or ci_examples,
        derandomize=not FUZZ_EXAMPLES,
        database=settings.default.database if FUZZ_EXAMPLES else None,
        deadline=None,
        # One daemon and one session serve every example of a target: that
        # they stay healthy across all of them is part of what is tested.
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )


@dataclass(frozen=True)
class Drawn(Generic[T]):
    """A drawn value whose repr (shown with a failing example) stays readable:
    a 1.5 MB path is shown by its ends and its length."""

    value: T

    def __repr__(self) -> str:
        text = repr(self.value)
        if len(text) <= 3000:
            return text
        return f"{text[:1500]} ...<{len(text)} characters>... {text[-500:]}"


def drawn(strategy: st.SearchStrategy[T]) -> st.SearchStrategy[Drawn[T]]:
    return strategy.map(Drawn)


def one_in(n: int) -> st.SearchStrategy[bool]:
    """True about once in `n` draws (Hypothesis favours the ends of a range,
    so the middle value marks the rare case)."""
    return st.integers(0, n - 1).map(lambda k: k == n // 2)


# -- the documented answers ---------------------------------------------------
# Tool codes a fuzzed call may end in. SANDBOX_LOST, OUTCOME_UNKNOWN and
# INTERNAL are not among them: no argument may kill the sandbox or reach a bug.
TOOL_CODES = {"", *(failure.code for failure in TOOL_FAILURES)} - {
    "SANDBOX_LOST",
    "OUTCOME_UNKNOWN",
    "INTERNAL",
}
# gRPC statuses a fuzzed request may end in (on a healthy engine, so not
# UNAVAILABLE either: that would say "retry" to a request that cannot work).
STATUSES = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.PERMISSION_DENIED,
}
RPC_TIMEOUT_S = 90.0


@contextlib.contextmanager
def watched(
    daemon: Any, docker_client: Any, caplog: Any, **session_fields: Any
) -> Iterator[tuple[Client, SessionHandle]]:
    """A client of `daemon` and a session of it; afterwards the daemon must
    still run a plain command, must have logged no unexpected error (grpcio's
    own logger included), and must leave no session and no container."""
    caplog.set_level(logging.INFO, logger="runtime")
    with Client(daemon.target) as client:
        session = client.session(**session_fields)
        yield client, session
        after = session.shell("echo still-here")
        assert after.ok and after.output["stdout"] == "still-here\n", after
        session.close()
        assert client.list_sessions() == []
    assert containers_of(docker_client, daemon.instance) == []
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


def check_result(msg: pb.ToolResult, call_id: str | None = None) -> str:
    """A ToolResult keeps DESIGN's promises; returns its code ("" when ok)."""
    code = msg.error.code
    assert code in TOOL_CODES, f"{code}: {msg.error.message[:500]}"
    assert msg.ok == (not code), msg
    assert isinstance(json.loads(msg.output_json), dict), msg.output_json[:200]
    if call_id is not None:
        assert msg.call_id == call_id
    if code:
        assert msg.error.message, f"{code} without a message"
    # An agent that never answers (the daemon gave up waiting) is a hang, not a timeout.
    assert "did not answer" not in msg.error.message, msg.error.message
    return code


def rpc(fn: Callable[..., T], request: Any, **kwargs: Any) -> T | grpc.StatusCode:
    """Call `fn`; its answer, or the status it ended with (a documented one)."""
    try:
        return fn(request, timeout=RPC_TIMEOUT_S, **kwargs)
    except grpc.RpcError as exc:
        failed = exc
    code, details = failed.code(), failed.details()
    assert code in STATUSES, f"{code}: {details}"
    assert details, f"{code} without details"
    return code  # type: ignore[no-any-return]


def streamed(fn: Callable[..., Any], request: Any) -> list[Any] | grpc.StatusCode:
    """Every message of a server stream, or the documented status it ended with."""
    return rpc(lambda r, **kw: list(fn(r, **kw)), request)


# -- text -------------------------------------------------------------------
surrogates = st.integers(0xD800, 0xDFFF).map(chr)
awkward = st.sampled_from(
    ["\x00", "\n", "\r", "\t", "\\", '"', "'", "/", ".", "*", "?", "[", "~", "`", ";", "$"]
    + ["\x7f", "\x1b", "\u202e", "\ufeff", "\u0085", "\u2028", "é", "😀", "𝕏", " "]
)
chars = st.characters(codec="utf-8") | awkward
# Pieces that mean something to a shell, a path or a terminal.
pieces = st.sampled_from(["..", "$(", "${", "\x1b[31m", "%s%n", "../", "\r\n", "{{", "\\u0000"])
short_text = st.text(chars, max_size=40)
mixed_text = st.lists(pieces | short_text, min_size=1, max_size=6).map("".join)
# Strings that reach the kernel or the agent protocol at their limits.
huge_text = st.builds(
    lambda piece, n: piece * n,
    st.sampled_from(["x", "é", "😀", "\x01", "a b", "\\"]),
    st.integers(100_000, 1_500_000),
)
text = st.one_of(
    short_text,
    mixed_text,
    st.text(chars | surrogates, min_size=1, max_size=20),
    st.just(""),
    huge_text,
)

# -- paths ------------------------------------------------------------------
component = st.one_of(
    st.text(chars, min_size=1, max_size=12).map(lambda c: c.replace("/", "_")),
    st.sampled_from([".", "..", "", "a" * 255, "a" * 256, "é" * 128, "😀" * 64, "-rf", "~"]),
)
ROOTS = ["/workspace", "/tmp", "", "/", "/proc/self", "/proc/1", "/dev", "/etc", "/workspace/.."]
paths = st.one_of(
    st.builds(
        lambda root, parts: "/".join([root, *parts]),
        st.sampled_from(ROOTS),
        st.lists(component, max_size=6),
    ),
    # 5,000+ characters, in one component or a few.
    st.builds(
        lambda root, n, piece: root + "/" + piece * n,
        st.sampled_from(["/workspace", "/tmp", ""]),
        st.integers(5_000, 20_000),
        st.sampled_from(["a", "é", "ab/", "a" * 300 + "/"]),
    ),
    # 1,000+ components.
    st.builds(
        lambda root, n, name: root + ("/" + name) * n,
        st.sampled_from(["/workspace", "/tmp", "/proc/self/root"]),
        st.integers(1_000, 2_500),
        st.sampled_from(["d", "..", ".", "", "zz"]),
    ),
    st.sampled_from(
        ["/proc/self/root/etc/passwd", "/proc/self/fd/0", "/proc/1/environ", "/dev/zero"]
        + ["/dev/stdin", "/sys/fs/cgroup/pids.max", "/workspace/../etc/shadow", "//workspace"]
        + ["/proc/self/mem", "/proc/kmsg", "/dev/full", "/tmp/.X11-unix", "/workspace/\x00x"]
    ),
    text,
)

# -- JSON -------------------------------------------------------------------
numbers = st.one_of(
    st.integers(),
    st.integers(-(2**200), 2**200),
    st.sampled_from([0, -1, 1, 2**31, 2**63 - 1, 2**63, -(2**63), 2**64, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -1e308, 5e-324, 0.5, -0.0]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, text, paths)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(short_text, inner, max_size=5),
    max_leaves=12,
)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def to_json(value: Any) -> str:
    """JSON text as a client writes it: NaN/Infinity as Python's json spells
    them, and lone surrogates as \\udXXX escapes (ASCII, so it travels)."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True)


raw_json_text = st.one_of(
    st.just(""),
    st.just("   "),
    st.sampled_from(["{", "}", "[]", "null", "1", '"x"', "NaN", "{}{}", '{"a":1,"a":2}']),
    st.sampled_from(['{"command": "\\ud800"}', '{"path": "\\udfff\\ud800"}', '{"\\udc80": 1}']),
    st.integers(33, 200_000).map(nested),
    st.integers(2, 40).map(lambda d: '{"a":' * d + "1" + "}" * d),
    short_text,
)

# -- call ids ---------------------------------------------------------------
_fresh = itertools.count()
odd_call_ids = st.one_of(
    st.text(chars, min_size=1, max_size=40),
    st.sampled_from(["\x00", " ", "\n", "a" * 256, "a" * 257, "😀" * 64, "😀" * 65, "é" * 129]),
    st.integers(300, 200_000).map(lambda n: "i" * n),
)
# Mostly a new id each draw (a repeated id answers from the journal, which
# would hide the call), sometimes an odd one.
fresh_call_ids = st.builds(lambda: f"fuzz-{next(_fresh)}")
call_ids = one_in(8).flatmap(lambda rare: odd_call_ids if rare else fresh_call_ids)


# -- tar archives -------------------------------------------------------------
member_names = st.one_of(
    st.text(chars, min_size=1, max_size=30),
    st.sampled_from(["../x", "/etc/x", "a/../../b", ".", "./", "a" * 300, "x/" * 200 + "f"])
    | st.sampled_from(["x/" * 1200 + "f", "é" * 200 + "/f"]),
)
member_kinds = st.sampled_from(
    [tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE]
    + [tarfile.FIFOTYPE, tarfile.BLKTYPE, tarfile.CONTTYPE, b"Z", tarfile.GNUTYPE_SPARSE]
)


@st.composite
def tar_archives(draw: st.DrawFn) -> bytes:
    """A tar archive of random members: names, kinds, modes, link targets."""
    buffer = io.BytesIO()
    fmt = draw(st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT]))
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for _ in range(draw(st.integers(0, 6))):
            name = draw(member_names).replace("\x00", "")
            try:
                info = tarfile.TarInfo(name)
                info.type = draw(member_kinds)
                info.mode = draw(st.integers(0, 0o7777))
                info.linkname = draw(member_names).replace("\x00", "")
                info.mtime = draw(st.integers(0, 2**33 - 1))
                data = draw(st.binary(max_size=64)) if info.type == tarfile.REGTYPE else b""
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data) if data else None)
            except (ValueError, UnicodeError):
                continue  # a member tarfile itself cannot write in this format
    raw = buffer.getvalue()
    if draw(st.booleans()):
        return raw
    # Then damage it: cut it, or flip bytes.
    cut = draw(st.integers(0, len(raw)))
    flips = draw(st.lists(st.tuples(st.integers(0, max(0, len(raw) - 1)), st.integers(0, 255))))
    damaged = bytearray(raw[:cut] if draw(st.booleans()) else raw)
    for where, value in flips:
        if where < len(damaged):
            damaged[where] = value
    return bytes(damaged)


uploads = st.one_of(tar_archives(), st.binary(max_size=2048), st.just(b""))


# -- tool calls as a model might write them, or worse ------------------------------
TOOLS = {tool["name"]: tool for tool in default_registry().catalog()}
commands = st.one_of(
    st.sampled_from(
        ["true", "echo hi", "pwd", "cat", "exit 3", "printf '\\xff\\xfe\\x00'", "env"]
        + ["yes | head -c 3000000", "kill -9 $$", "sleep 0.3", "cd /tmp", "cd /nonexistent"]
        + ["export X=1", "unset PATH", "exec 1>&-", "ls -R /workspace | head", "umask 777"]
        + ["mkdir -p /workspace/d && cd /workspace/d", "rm -rf /workspace/*", "read x", "exec 0<&-"]
        + ["mkdir -p /workspace/" + "d/" * 1100, "ln -s / /workspace/root", "mkfifo /workspace/f"]
    ),
    text,
)
regexes = st.one_of(
    st.sampled_from(["(a+)+$", "Listening", "[", "(?<=a*)b", "x" * 1000, "\\", "(?P<n>", ".*"]),
    text,
)
# Plausible values per argument name (so that validation lets many through),
# always mixed with values of any JSON type.
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "path": paths,
    "cwd": paths,
    "command": commands,
    "content": text,
    "old_string": text,
    "new_string": text,
    "stdin": text,
    "offset": numbers,
    "limit": numbers,
    "timeout_s": numbers,
    "idle_timeout_s": numbers,
    "on_idle": st.sampled_from(["background", "kill"]) | short_text,
    "env": st.dictionaries(text, text, max_size=4),
    "args": st.lists(text, max_size=70),
    "process_id": st.sampled_from(["p1", "p2", "p0", "p999999999999"]) | text,
    "wait_for": regexes,
}


def value_for(name: str) -> st.SearchStrategy[Any]:
    plausible = PLAUSIBLE.get(name)
    if plausible is None:
        return json_values
    return one_in(4).flatmap(lambda rare: json_values if rare else plausible)


@st.composite
def arguments_json(draw: st.DrawFn, tool: str) -> str:
    """The arguments of `tool` as a model might write them, or worse."""
    if draw(one_in(10)):
        return draw(raw_json_text)
    schema = TOOLS[tool]["parameters"] if tool in TOOLS else {"properties": {}}
    required = set() if draw(one_in(10)) else set(schema.get("required", ()))
    optional = sorted(set(schema["properties"]) - required)
    if optional and draw(st.booleans()):
        # Focused: the required arguments and one optional one, so that most
        # calls pass validation and reach the sandbox.
        optional = [draw(st.sampled_from(optional))]
    args = draw(
        st.fixed_dictionaries(
            {f: value_for(f) for f in required},
            optional={f: value_for(f) for f in optional},
        )
    )
    if draw(one_in(6)):
        args.update(draw(st.dictionaries(short_text, json_values, min_size=1, max_size=3)))
    return to_json(args)


real_names = st.sampled_from(sorted(TOOLS))
odd_names = st.sampled_from(["", "Shell", "shell\x00", "shell ", "read_file" * 1000, "😀"])
tool_names = one_in(5).flatmap(lambda rare: odd_names | short_text if rare else real_names)


@st.composite
def tool_calls(draw: st.DrawFn) -> pb.ToolCall:
    name = draw(tool_names)
    return pb.ToolCall(id=draw(call_ids), name=name, arguments_json=draw(arguments_json(name)))


# -- proto fields (what a gRPC client can put in a request) ---------------------
def valid_utf8(value: str) -> str:
    """A proto string field carries only valid UTF-8: lone surrogates become '?'."""
    return value.encode("utf-8", "replace").decode("utf-8")


proto_text = text.map(valid_utf8)
proto_paths = paths.map(valid_utf8)
int64s = st.one_of(
    st.just(0),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([-1, 1, 2**31, 2**63 - 1, -(2**63), 6 << 20, 64 << 20, 1 << 40]),
)
doubles = st.one_of(
    st.just(0.0),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e-9, 0.001, 0.01, 1e308, float("nan"), float("inf"), -0.0]),
)
string_maps = st.dictionaries(proto_text, proto_text, max_size=4) | st.dictionaries(
    st.sampled_from(["toolrt.daemon", "toolrt.session", "toolrt.test", "PATH", "LD_PRELOAD"]),
    proto_text,
    max_size=3,
)
