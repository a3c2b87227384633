"""The spare shell's preamble (runtime/agent/spare.py) turns the environment
it started with into the call's, byte for byte, as bash's own start would
have: run by a real bash, for environments hypothesis makes up."""

from __future__ import annotations

import subprocess

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.agent import spare

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True).filter(spare.plain)
# Any text an environment can hold: no NUL; controls, quotes, backslashes,
# newlines and non-ASCII included.
VALUES = st.text(st.characters(blacklist_characters="\0", max_codepoint=0x2FFF), max_size=40)
ENVS = st.dictionaries(NAMES, VALUES, max_size=6)


def environment_after(had: dict[str, str], preamble: str) -> dict[str, str]:
    """The exported environment of a bash started with `had` once it ran `preamble`."""
    out = subprocess.run(
        ["/bin/bash", "-c", preamble + "/usr/bin/env -0"],
        env={"PATH": "/usr/bin:/bin", **had},
        capture_output=True,
        check=True,
    ).stdout
    env = dict(item.split(b"=", 1) for item in out.split(b"\0") if item)
    own = {b"PWD", b"SHLVL", b"_", b"OLDPWD"}
    return {k.decode(): v.decode() for k, v in env.items() if k not in own}


@settings(max_examples=60, deadline=None)
@given(had=ENVS, wanted=ENVS)
def test_the_preamble_gives_the_call_its_environment_exactly(had, wanted):
    preamble = spare.env_preamble(had, wanted)
    assert preamble is not None
    assert "\n" not in preamble  # the command's line numbers stay its own
    assert environment_after(had, preamble) == {"PATH": "/usr/bin:/bin", **wanted}


def test_a_variable_bash_reads_at_start_up_means_a_shell_of_its_own():
    for name in ("BASH_ENV", "SHELLOPTS", "BASH_FUNC_ls%%", "ENV", "PS4", "A-B", "UID"):
        assert spare.env_preamble({}, {name: "x"}) is None, name
        assert spare.env_preamble({name: "x"}, {}) is None, name
    # The same value in both needs no preamble, and refuses nothing.
    assert spare.env_preamble({"SHELLOPTS": "x"}, {"SHELLOPTS": "x"}) == ""


def test_exported_functions_never_meet_a_spare():
    assert spare.functions_in({"BASH_FUNC_exec%%": "() { :; }"})
    plan = spare.Plan("/", {"BASH_FUNC_eval%%": "() { :; }"})
    assert spare.start(plan, 1, 0, 0) is None
