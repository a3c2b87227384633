"""Pure parts of the file tools: edits, diffs, JUnit parsing, cp locations."""

from __future__ import annotations

import io
import tarfile

import pytest

from runtime.client.transfer import Remote, pack_for_upload, parse_location, unpack_download
from runtime.errors import InvalidArguments
from runtime.tools.files import decode_text, replace_exact, unified_diff
from runtime.tools.run_tests import parse_junit


def test_replace_exact_counts_and_refuses_missing_or_ambiguous_matches():
    assert replace_exact("a b a", "b", "c", False, "/f") == ("a c a", 1)
    assert replace_exact("a b a", "a", "x", True, "/f") == ("x b x", 2)
    with pytest.raises(InvalidArguments, match="0 matches"):
        replace_exact("abc", "z", "y", False, "/f")
    with pytest.raises(InvalidArguments, match="occurs 2 times"):
        replace_exact("a b a", "a", "x", False, "/f")
    with pytest.raises(InvalidArguments, match="identical"):
        replace_exact("abc", "b", "b", False, "/f")


def test_unified_diff_names_the_file_and_ends_lines():
    diff = unified_diff("one\ntwo", "one\nTWO", "/workspace/x")
    assert diff.splitlines()[:2] == ["--- a/workspace/x", "+++ b/workspace/x"]
    assert "-two\n" in diff and "+TWO\n" in diff and diff.endswith("\n")


def test_decode_text_tolerates_a_cut_character_only_when_cut():
    data = "é".encode() * 3
    assert decode_text(data[:-1], cut=True) == "éé"
    assert decode_text(data[:-1], cut=False) is None
    assert decode_text(b"\xff\xfe", cut=True) is None


JUNIT = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="2" skipped="1" tests="7">
<testcase classname="tests.test_a" file="tests/test_a.py" line="1" name="test_ok"/>
<testcase classname="tests.test_a.TestX" file="tests/test_a.py" name="test_bad[1-2]">
  <failure message="assert 1 == 2">long traceback</failure></testcase>
<testcase classname="tests.test_b" file="tests/test_b.py" name="test_text">
  <failure>E   ValueError: boom
last line of text</failure></testcase>
<testcase classname="tests.test_c" file="tests/test_c.py" name="test_fix">
  <error message="failed on setup with &quot;fixture 'nope' not found&quot;"/></testcase>
<testcase classname="tests.test_a" file="tests/test_a.py" name="test_skip">
  <skipped message="why"/></testcase>
</testsuite></testsuites>"""


def test_parse_junit_counts_and_failures():
    assert parse_junit(JUNIT) == {
        "passed": 3,
        "failed": 2,
        "errors": 1,
        "skipped": 1,
        "failures": [
            {"test_id": "tests/test_a.py::TestX::test_bad[1-2]", "message": "assert 1 == 2"},
            {"test_id": "tests/test_b.py::test_text", "message": "last line of text"},
            {
                "test_id": "tests/test_c.py::test_fix",
                "message": "failed on setup with \"fixture 'nope' not found\"",
            },
        ],
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("abc123:/workspace/x", Remote("abc123", "/workspace/x")),
        ("abc123:src", Remote("abc123", "/workspace/src")),
        ("abc123:", Remote("abc123", "/workspace")),
        ("./abc:def", "./abc:def"),
        ("/tmp/a:b", "/tmp/a:b"),
        ("local/dir", "local/dir"),
    ],
)
def test_parse_location(text, expected):
    assert parse_location(text) == expected


def test_pack_a_file_under_the_destination_name(tmp_path):
    (tmp_path / "a.txt").write_text("hi")
    tar, dest = pack_for_upload(tmp_path / "a.txt", "/workspace/b.txt")
    assert dest == "/workspace"
    assert tarfile.open(fileobj=io.BytesIO(tar)).getnames() == ["b.txt"]
    tar, dest = pack_for_upload(tmp_path / "a.txt", "/workspace/in/")
    assert (dest, tarfile.open(fileobj=io.BytesIO(tar)).getnames()) == ("/workspace/in/", ["a.txt"])


def test_unpack_refuses_links_leaving_the_destination(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        top = tarfile.TarInfo("d")
        top.type = tarfile.DIRTYPE
        tar.addfile(top)
        link = tarfile.TarInfo("d/escape")
        link.type = tarfile.SYMTYPE
        link.linkname = "../../../etc/passwd"
        tar.addfile(link)
    with pytest.raises(tarfile.TarError):
        unpack_download(buffer.getvalue(), tmp_path / "out")
    assert not (tmp_path / "out" / "escape").exists()


@pytest.mark.parametrize(
    ("model", "text", "pointer"),
    [
        ("read_file", '{"path": "a", "bogus": 1}', "/bogus: unknown property"),
        ("read_file", '{"offset": 2}', "/path: required property is missing"),
        ("read_file", '{"path": "a", "limit": 0}', "/limit"),
        ("read_file", '{"path": "a\\u0000b"}', "/path"),
        ("write_file", '{"path": "a"}', "/content: required property is missing"),
        ("edit_file", '{"path": "a", "old_string": "", "new_string": "b"}', "/old_string"),
        ("edit_file", '{"path": "a", "old_string": "x", "new_string": 5}', "/new_string"),
        ("list_files", '{"recursive": "yes please"}', "/recursive"),
        ("run_tests", '{"args": ["-x", 3]}', "/args/1"),
        ("run_tests", '{"args": "-x"}', "/args"),
    ],
)
def test_file_tool_arguments_are_validated(model, text, pointer):
    from runtime.core import default_registry

    with pytest.raises(InvalidArguments, match=pointer.replace("/", r"\/")):
        default_registry().parse(model, text)


def test_null_optional_arguments_mean_absent():
    from runtime.core import default_registry

    _, args = default_registry().parse(
        "edit_file", '{"path": "a", "old_string": "x", "new_string": "y", "replace_all": null}'
    )
    assert args.replace_all is None
    _, args = default_registry().parse("run_tests", '{"path": null, "args": null}')
    assert (args.path, args.args) == (None, None)
