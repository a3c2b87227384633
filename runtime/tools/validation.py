"""Untrusted tool arguments → a validated pydantic model, or a clear refusal.

Everything here treats `arguments_json` as hostile: size and nesting depth
are checked on the raw text before the JSON parser goes deep, then pydantic
checks the schema. Messages name the field as a JSON pointer and say what
was expected, so the model can correct itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import regex
from pydantic import BaseModel, ValidationError

from runtime.agent.protocol import NAME_MAX, PATH_MAX
from runtime.errors import InvalidArguments
from runtime.json_shape import MAX_ITEMS, json_shape

ModelT = TypeVar("ModelT", bound=BaseModel)
T = TypeVar("T")

MAX_ARGUMENT_BYTES = 16 << 20
MAX_DEPTH = 32
# Schema violations named in one refusal.
MAX_PROBLEMS = 10
# Linux refuses to exec a command one of whose arguments or environment
# strings (NAME=value) has MAX_ARG_STRLEN bytes or more, its NUL included.
MAX_ARG_STRLEN = 128 << 10
# What a command line may take of that: the agent puts a short prelude of
# its own in front of it (the shell-state trap).
MAX_COMMAND_BYTES = MAX_ARG_STRLEN - (8 << 10)
# JSON's \uXXXX escapes can spell half of a surrogate pair, which no UTF-8
# encoder (the sandbox's kernel, protobuf) accepts. The patterns here are
# matched with `concurrent=True`: scanning a long string lets go of the GIL.
SURROGATE = regex.compile("[\ud800-\udfff]")


def no_nul(value: T) -> T:
    """Field validator for text that reaches the kernel (paths, argv, env):
    a NUL would silently cut it there, so it is refused here."""
    texts = value if isinstance(value, list) else [value]
    if any(isinstance(text, str) and "\x00" in text for text in texts):
        msg = "must not contain NUL characters"
        raise ValueError(msg)
    return value


# Large texts are measured and hashed a slice at a time: one encode of
# megabytes is one C call that holds the interpreter lock throughout, and the
# event loop (other tenants' calls) waits for it even when it runs on a
# worker thread.
SLICE_CHARS = 1 << 18


def text_slices(text: str) -> Iterator[bytes]:
    """`text` as UTF-8 (lone surrogates kept), a slice at a time."""
    for start in range(0, len(text), SLICE_CHARS):
        yield text[start : start + SLICE_CHARS].encode("utf-8", "surrogatepass")


def utf8_size(text: str) -> int:
    if text.isascii():  # known without a scan: CPython keeps the flag
        return len(text)
    return sum(len(piece) for piece in text_slices(text))


def command_too_long(command: str) -> str | None:
    """Why the kernel would refuse `command` as one argument (E2BIG), or None."""
    size = utf8_size(command)
    if size <= MAX_COMMAND_BYTES:
        return None
    return (
        f"is {size} bytes; a command line has at most {MAX_COMMAND_BYTES} bytes (the "
        "kernel's limit on one argument)"
    )


def env_problem(name: str, value: str) -> str | None:
    """Why `name=value` cannot be in a command's environment, or None."""
    if not name or "=" in name or "\x00" in name + value:
        return "names must be non-empty without '=' or NUL, values without NUL"
    size = utf8_size(name) + 1 + utf8_size(value)
    if size >= MAX_ARG_STRLEN:
        return (
            f"is {size} bytes as NAME=value; the kernel takes at most {MAX_ARG_STRLEN - 1} "
            "bytes per variable (pass large data in a file)"
        )
    return None


def path_too_long(path: str) -> str | None:
    """Why the sandbox's kernel would refuse `path` as too long
    (ENAMETOOLONG), or None: a file name over NAME_MAX bytes, or a path of
    PATH_MAX bytes or more."""
    size = utf8_size(path)
    if size >= PATH_MAX:
        return f"is {size} bytes long; a path has at most {PATH_MAX - 1} bytes"
    for name in path.split("/"):
        size = utf8_size(name)
        if size > NAME_MAX:
            return (
                f"has a file name of {size} bytes ({escaped(name[:24])}...); "
                f"a file name has at most {NAME_MAX} bytes"
            )
    return None


def lone_surrogate(value: Any, loc: tuple[int | str, ...] = ()) -> tuple[int | str, ...] | None:
    """Where in parsed JSON a string (or key) holds a lone surrogate, if anywhere."""
    if isinstance(value, str):
        return loc if SURROGATE.search(value, concurrent=True) else None
    if isinstance(value, dict):
        for key, item in value.items():
            bad_key = SURROGATE.search(key, concurrent=True)
            found = (*loc, key) if bad_key else lone_surrogate(item, (*loc, key))
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = lone_surrogate(item, (*loc, index))
            if found is not None:
                return found
    return None


def escaped(text: str) -> str:
    """`text` with lone surrogates written as \\uXXXX escapes (safe to encode)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def pointer(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as an RFC 6901 JSON pointer."""
    parts = [str(p).replace("~", "~0").replace("/", "~1") for p in loc]
    return "/" + "/".join(parts) if parts else "/"


def _describe(error: dict[str, Any]) -> str:
    where = pointer(tuple(error.get("loc", ())))
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        return f"{where}: unknown property (not in this tool's schema)"
    if kind == "missing":
        return f"{where}: required property is missing"
    value = error.get("input")
    if isinstance(value, str | bytes | list | tuple):
        value = value[:60]
    got = json.dumps(value, default=str)
    if len(got) > 60:
        got = got[:57] + "..."
    return f"{where}: {error.get('msg', 'invalid')} (got {got})"


def load_json(text: str) -> Any:
    """The one JSON parse of a call's arguments (a test counts its calls)."""
    return json.loads(text)


@dataclass(frozen=True)
class Arguments:
    """A call's arguments text, measured and parsed once: the idempotency
    fingerprint and the tool's validation both start from it.

    `value` is the JSON object (nulls still in it) when the text is one
    within the bounds; otherwise `problem` says why not, as the words that
    follow the tool's name (`lead` goes before it)."""

    text: str
    value: dict[str, Any] | None
    lead: str = ""
    problem: str = ""

    def refusal(self, tool_name: str) -> InvalidArguments:
        return InvalidArguments(f"{self.lead} {tool_name}{self.problem}")


def read_arguments(
    text: str,
    max_bytes: int = MAX_ARGUMENT_BYTES,
    max_depth: int = MAX_DEPTH,
    max_items: int = MAX_ITEMS,
) -> Arguments:
    """`text` measured, then parsed if it is within the bounds.

    Size, nesting and item count are checked on the raw text before the
    JSON parser runs, so the work is bounded whatever the text holds. Large
    texts are for a worker thread (`cpu.compute`): this holds the GIL only
    in short steps, but for the parse itself.
    """
    # Arguments a dialect rebuilt from a parsed message may hold lone surrogates.
    size = utf8_size(text)
    if size > max_bytes:
        return Arguments(text, None, "arguments of", f" are {size} bytes; the limit is {max_bytes}")
    stripped = text.strip() or "{}"
    depth, items = json_shape(stripped, max_items)
    if depth > max_depth:
        detail = f" nest {depth} levels deep; the limit is {max_depth}"
        return Arguments(text, None, "arguments of", detail)
    if items > max_items:
        detail = (
            f" hold more than {max_items} items (array elements and object members); "
            f"the limit is {max_items}"
        )
        return Arguments(text, None, "arguments of", detail)
    try:
        data = load_json(stripped)
    except (json.JSONDecodeError, RecursionError) as exc:
        return Arguments(text, None, "arguments of", f" are not valid JSON: {exc}")
    if not isinstance(data, dict):
        detail = f" must be a JSON object, got {type(data).__name__}"
        return Arguments(text, None, "arguments of", detail)
    bad = lone_surrogate(data)
    if bad is not None:
        detail = (
            f": {escaped(pointer(bad))}: contains a lone surrogate (a \\uD800-\\uDFFF "
            "escape without its pair); strings must be valid Unicode"
        )
        return Arguments(text, None, "invalid arguments for", detail)
    return Arguments(text, data)


def validate(tool_name: str, model: type[ModelT], arguments: Arguments) -> ModelT:
    """Validated arguments, or InvalidArguments saying what is wrong where."""
    if arguments.value is None:
        raise arguments.refusal(tool_name)
    # Strict OpenAI schemas make models send null for every optional
    # property: null means absent.
    data = {key: value for key, value in arguments.value.items() if value is not None}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        problems = "; ".join(_describe(e) for e in errors[:MAX_PROBLEMS])  # type: ignore[arg-type]
        if len(errors) > MAX_PROBLEMS:
            problems += f"; and {len(errors) - MAX_PROBLEMS} more"
        msg = f"invalid arguments for {tool_name}: {problems}"
        raise InvalidArguments(msg) from exc


def parse_arguments(
    tool_name: str,
    model: type[ModelT],
    arguments_json: str,
    max_bytes: int = MAX_ARGUMENT_BYTES,
    max_depth: int = MAX_DEPTH,
    max_items: int = MAX_ITEMS,
) -> ModelT:
    """`validate` of `read_arguments`: for one caller that has only the text."""
    arguments = read_arguments(arguments_json, max_bytes, max_depth, max_items)
    return validate(tool_name, model, arguments)
