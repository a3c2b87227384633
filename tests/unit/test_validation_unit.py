"""Argument validation and output shaping: pure logic, no engine."""

from __future__ import annotations

import json

import pytest

from runtime.core import default_registry
from runtime.errors import InvalidArguments, UnknownTool
from runtime.json_shape import MAX_ITEMS, json_shape
from runtime.tools.output import fit_output, render_stream, strip_ansi
from runtime.tools.shell import ShellArgs
from runtime.tools.validation import parse_arguments, pointer


def parse(text: str) -> ShellArgs:
    return parse_arguments("shell", ShellArgs, text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object, got list"),
        ('"ls"', "must be a JSON object, got str"),
        ("{}", "/command: required property is missing"),
        ('{"command": 5}', "/command: Input should be a valid string"),
        ('{"command": "ls", "extra": 1}', "/extra: unknown property"),
        ('{"command": "ls", "timeout_s": 0}', "/timeout_s: Input should be greater than 0"),
        ('{"command": "ls", "timeout_s": -3}', "/timeout_s"),
        ('{"command": "ls", "timeout_s": NaN}', "/timeout_s"),
        ('{"command": "ls", "cwd": "relative/dir"}', "/cwd: Value error, must be an absolute path"),
        ('{"command": "ls", "env": {"A": 1}}', "/env/A: Input should be a valid string"),
        ('{"command": "ls", "env": {"A=B": "x"}}', "/env"),
        ('{"command": ""}', "/command"),
    ],
)
def test_invalid_arguments_name_the_field(text, expected):
    with pytest.raises(InvalidArguments) as err:
        parse(text)
    assert expected in err.value.message


def test_null_means_absent_and_valid_arguments_parse():
    args = parse('{"command": "ls", "cwd": null, "timeout_s": null, "env": null}')
    assert args.command == "ls" and args.cwd is None and args.timeout_s is None
    with pytest.raises(InvalidArguments) as err:
        parse("  ")  # empty text is {}: the command is missing
    assert "/command" in err.value.message


def test_deep_and_huge_arguments_are_refused_before_parsing():
    deep = '{"command": "ls", "env": ' + "[" * 10_000 + "]" * 10_000 + "}"
    with pytest.raises(InvalidArguments) as err:
        parse(deep)
    assert "nest" in err.value.message
    huge = json.dumps({"command": "x" * 200})
    with pytest.raises(InvalidArguments) as err:
        parse_arguments("shell", ShellArgs, huge, max_bytes=100)
    assert "limit is 100" in err.value.message


def test_json_shape_ignores_brackets_and_commas_inside_strings():
    assert json_shape('{"a": "[[[[{{{{,,", "b": [1, [2]]}', 1000) == (3, 5)
    assert json_shape('{"a": "\\"[[,"}', 1000) == (1, 1)
    assert json_shape('{"a": "\\\\", "b": "never closed [[[', 1000) == (1, 2)
    # The count stops once past the limit, however long the text.
    assert json_shape("[" + "1," * 1_000_000 + "1]", 10) == (1, 11)


def test_many_items_are_refused_before_parsing_and_few_problems_named():
    many = '{"command": "ls", "x": [' + ",".join(["1"] * (MAX_ITEMS + 1)) + "]}"
    with pytest.raises(InvalidArguments) as err:
        parse(many)
    assert f"more than {MAX_ITEMS} items" in err.value.message
    wrong = json.dumps({"command": "ls", "env": {f"K{i}": i for i in range(50)}})
    with pytest.raises(InvalidArguments) as err:
        parse(wrong)
    assert err.value.message.count("Input should be a valid string") == 10
    assert err.value.message.endswith("; and 40 more")


def test_pointer_escapes_per_rfc6901():
    assert pointer(("env", "a/b~c")) == "/env/a~1b~0c"
    assert pointer(()) == "/"


def test_unknown_tool_lists_the_available_ones():
    with pytest.raises(UnknownTool) as err:
        default_registry().get("nope")
    assert "shell" in err.value.message


def test_render_stream_marks_what_was_dropped():
    text, replaced = render_stream(b"head\n", b"tail\n", 1000, 7)
    assert text.startswith("head\n")
    assert text.endswith("tail\n")
    assert "990 bytes (7 lines) dropped" in text
    assert replaced is False
    text, replaced = render_stream(b"\xff", b"", 1)
    assert text == "\ufffd" and replaced is True


def test_ansi_sequences_are_stripped():
    assert strip_ansi("\x1b[31mred\x1b[0m \x1b]0;title\x07done") == "red done"


def test_fit_output_keeps_results_under_the_cap():
    output = {"exit_code": 0, "stdout": "x" * 500_000, "stderr": "\x01" * 100_000}
    fitted = fit_output(output, 100_000)
    assert len(json.dumps(fitted, ensure_ascii=False).encode()) <= 100_000
    assert fitted["result_truncated"] is True
    assert fitted["exit_code"] == 0


def test_lone_surrogates_are_found_in_keys_values_and_lists():
    from runtime.tools.output import without_surrogates
    from runtime.tools.validation import lone_surrogate

    assert lone_surrogate({"a": ["ok", {"b": "x\udcff"}]}) == ("a", 1, "b")
    assert lone_surrogate({"\ud800": 1}) == ("\ud800",)
    assert lone_surrogate({"a": "\U0001f600 paired is fine"}) is None
    fixed, replaced = without_surrogates({"p": ["bad\udcff", "good"], "n": 3})
    assert (fixed, replaced) == ({"p": ["bad\ufffd", "good"], "n": 3}, True)
    same = {"p": "good"}
    assert without_surrogates(same) == (same, False)
