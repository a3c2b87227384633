"""The agent's redaction of secrets: forms, streams, environments (no engine)."""

from __future__ import annotations

import base64
import random

import pytest

from runtime.agent.redact import Redactor, base64_forms, decode_secrets, encode_secrets

TOKEN = "ghp_Zx9Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz"
SECRETS = {"GITHUB_TOKEN": TOKEN, "PW": "hunter2-long"}
MARK = b"[REDACTED:GITHUB_TOKEN]"


def redactor() -> Redactor:
    return Redactor(SECRETS)


def test_a_value_is_replaced_by_its_name():
    out = redactor().redact(f"token={TOKEN}; pw=hunter2-long\n".encode())
    assert out == b"token=" + MARK + b"; pw=[REDACTED:PW]\n"


@pytest.mark.parametrize("prefix", [b"", b"a", b"ab", b"abc", b"Authorization: Basic "])
@pytest.mark.parametrize("urlsafe", [False, True])
def test_base64_forms_are_caught_at_every_alignment(prefix, urlsafe):
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    encoded = encode(prefix + TOKEN.encode() + b"\n")
    out = redactor().redact(b"x " + encoded + b" y")
    assert MARK in out
    # What is left of the encoded text cannot be decoded back to the value.
    assert TOKEN.encode() not in out
    for form in base64_forms(TOKEN.encode()):
        assert form not in out


def test_the_forms_of_a_value_depend_on_it_alone():
    value = b"\xff\xfe" + TOKEN.encode()  # bytes whose base64 holds + and /
    forms = base64_forms(value)
    assert any(b"+" in f or b"/" in f for f in forms)
    assert any(b"-" in f or b"_" in f for f in forms)


def test_short_values_have_no_base64_forms():
    assert base64_forms(b"abcd") == []


@pytest.mark.parametrize("cut", range(1, len(TOKEN)))
def test_a_secret_split_across_two_pieces_is_caught(cut):
    stream = redactor().stream()
    data = f"before {TOKEN} after".encode()
    at = len("before ") + cut
    out = stream.feed(data[:at]) + stream.feed(data[at:]) + stream.flush()
    assert out == b"before " + MARK + b" after"


def test_a_stream_in_random_pieces_equals_the_whole():
    rng = random.Random(7)
    whole = b"".join(
        rng.choice(
            [TOKEN.encode(), b"hunter2-long", base64.b64encode(TOKEN.encode()), b"g", b"xy\n"]
        )
        for _ in range(400)
    )
    r = redactor()
    stream, out, pos = r.stream(), [], 0
    while pos < len(whole):
        step = rng.randint(1, 60)
        out.append(stream.feed(whole[pos : pos + step]))
        pos += step
    out.append(stream.flush())
    assert b"".join(out) == r.redact(whole)


def test_output_that_cannot_begin_a_secret_is_not_held_back():
    stream = redactor().stream()
    assert stream.feed(b"Serving on port 8000\n") == b"Serving on port 8000\n"
    # The first bytes of a secret wait for what follows.
    assert stream.feed(b"ready ghp_Zx") == b"ready "
    assert stream.flush() == b"ghp_Zx"


def test_without_secrets_nothing_changes_or_waits():
    r = Redactor()
    assert r.redact(b"abc") == b"abc"
    assert r.stream().feed(b"abc") == b"abc"
    assert r.environment({"A": "${A}"}) == {"A": "${A}"}


def test_reversed_and_hex_forms_are_not_caught():
    # The documented limit: redaction is a safety net, not a boundary.
    r = redactor()
    assert TOKEN[::-1].encode() in r.redact(TOKEN[::-1].encode())
    assert TOKEN.encode().hex().encode() in r.redact(TOKEN.encode().hex().encode())


def test_commands_get_the_secrets_and_references_expand():
    env = redactor().environment({"AUTH": "token ${GITHUB_TOKEN}", "OTHER": "${NOPE}"})
    assert env["GITHUB_TOKEN"] == TOKEN
    assert env["AUTH"] == f"token {TOKEN}"
    assert env["OTHER"] == "${NOPE}"


def test_exports_keep_references_not_values():
    kept, notes = redactor().references(
        {
            "GITHUB_TOKEN": TOKEN,
            "AUTH": f"token {TOKEN}",
            "B64": base64.b64encode(TOKEN.encode()).decode(),
            "PLAIN": "x",
        }
    )
    assert kept == {"AUTH": "token ${GITHUB_TOKEN}", "PLAIN": "x"}
    assert notes and "B64" in notes[0]
    assert TOKEN not in repr(kept) + repr(notes) + repr(redactor())


def test_the_secrets_body_round_trips_and_refuses_bad_shapes():
    assert decode_secrets(encode_secrets(SECRETS)) == SECRETS
    for bad in (b"[]", b'{"1X": "v"}', b'{"A": ""}', b'{"A": 1}'):
        with pytest.raises(ValueError, match="NAME to non-empty string"):
            decode_secrets(bad)


@pytest.mark.parametrize("size", [4, 10, len(TOKEN) - 1])
def test_a_piece_of_a_secret_left_at_a_cut_is_redacted(size):
    r = redactor()
    head = b"x" * 50 + TOKEN[:size].encode()
    tail = TOKEN[len(TOKEN) - size :].encode() + b"y" * 50
    assert r.redact(head, cut_after=True) == b"x" * 50 + MARK
    assert r.redact(tail, cut_before=True) == MARK + b"y" * 50
    # Without a cut there, the same bytes are ordinary text.
    assert r.redact(head) == head and r.redact(tail) == tail


def test_pieces_shorter_than_four_bytes_and_whole_values_at_a_cut():
    r = redactor()
    assert r.redact(b"abc ghp", cut_after=True) == b"abc ghp"
    assert r.redact(b"hunt", cut_after=True) == b"[REDACTED:PW]"
    assert r.redact(f"a {TOKEN}".encode(), cut_after=True, cut_before=True) == b"a " + MARK
    # A cut inside a base64 form: its piece goes too.
    core = base64_forms(TOKEN.encode())[0]
    assert r.redact(b"Basic " + core[:6], cut_after=True) == b"Basic " + MARK


def test_text_with_any_lone_surrogate_is_redacted_and_kept():
    text = f"\udcff\ud800/{TOKEN}"
    assert redactor().redact_text(text) == "\udcff\ud800/" + MARK.decode()
    assert redactor().found_text(text) and not redactor().found_text("\ud800")
