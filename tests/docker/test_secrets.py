"""Secrets on the real engine: in every command's environment, redacted from
every output path (before the head/tail cut, across streamed chunks, in
background output, file reads and text files of downloads), kept as a
reference in persisted exports, and the limits of redaction."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
from pathlib import Path

import grpc
import pytest

from runtime.client import Client
from runtime.client.sdk import ToolrtRpcError

pytestmark = pytest.mark.docker

# base64 of this value holds + and / (and so - and _ URL-safe).
TOKEN = "ghp_S3cr3t>>>???~~~valueZ9" + "q" * 10
MARK = "[REDACTED:GITHUB_TOKEN]"
HEAD = TOKEN[:8]
TAIL = TOKEN[-8:]


@pytest.fixture
def daemon(make_daemon, tmp_path: Path):
    path = tmp_path / "secrets.env"
    path.write_text(f"GITHUB_TOKEN={TOKEN}\nAWS_KEY=aws-key-value-1\n")
    path.chmod(0o600)
    return make_daemon(secrets_file=str(path), tenants={"default": {"secrets": ["GITHUB_TOKEN"]}})


@pytest.fixture
def session(client: Client):
    with client.session(secrets=["GITHUB_TOKEN"]) as s:
        yield s


SPLIT = 'printf "x%s" "${GITHUB_TOKEN:0:12}"; sleep 1; printf "%s\\n" "${GITHUB_TOKEN:12}"'


def leaks(text: str) -> bool:
    return TOKEN in text or HEAD in text or TAIL in text


def test_commands_get_the_secret_and_its_output_is_redacted(session):
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    result = session.shell(
        'printf %s "$GITHUB_TOKEN" | sha256sum; echo "out $GITHUB_TOKEN"; '
        'echo "err $GITHUB_TOKEN" >&2; (echo "sub $GITHUB_TOKEN")'
    )
    assert result.ok, result
    assert digest in result.output["stdout"]
    assert f"out {MARK}\nsub {MARK}\n" in result.output["stdout"]
    assert result.output["stderr"] == f"err {MARK}\n"


def test_base64_forms_are_redacted_at_every_alignment(session):
    command = "; ".join(
        f"printf '{prefix}%s\\n' \"$GITHUB_TOKEN\" | base64 -w0{urlsafe}; echo"
        for prefix in ("", "a", "ab", "Basic ")
        for urlsafe in ("", " | tr '+/' '-_'")
    )
    out = session.shell(command).output["stdout"]
    lines = out.splitlines()
    assert len(lines) == 8 and all(MARK in line for line in lines), out
    core = base64.b64encode(TOKEN.encode())[4:-4].decode()
    assert core not in out and core.translate(str.maketrans("+/", "-_")) not in out


def test_reversed_and_hex_forms_are_not_caught(session):
    # The documented limit: redaction is a safety net, not a boundary.
    out = session.shell(
        'python3 -c \'import os; t = os.environ["GITHUB_TOKEN"]; print(t[::-1]); '
        "print(t.encode().hex())'"
    ).output["stdout"]
    assert out == f"{TOKEN[::-1]}\n{TOKEN.encode().hex()}\n"


def test_a_secret_straddling_the_head_and_tail_cuts_never_leaks_a_part(client):
    with client.session(secrets=["GITHUB_TOKEN"], limits={"output_cap_bytes": 1000}) as session:
        # The head keeps 200 bytes: the secret starts 10 bytes before its end.
        head = session.shell("printf 'a%.0s' $(seq 190); printf %s \"$GITHUB_TOKEN\"; seq 1 2000")
        # The tail keeps 800 bytes: it starts 10 bytes before the secret's end.
        tail = session.shell(
            f"seq 1 2000; printf %s \"$GITHUB_TOKEN\"; printf 'b%.0s' $(seq {800 - 10})"
        )
    for result in (head, tail):
        out = result.output["stdout"]
        assert not leaks(out) and TOKEN[:4] not in out and TOKEN[-4:] not in out, out
    assert head.output["stdout"].startswith("a" * 190 + "[REDACTED:")


def test_a_secret_split_across_two_streamed_chunks_is_caught(client, session):
    events = list(
        client.stream(
            session.id,
            "shell",
            {"command": SPLIT},
        )
    )
    chunks = [data.decode() for item in events if isinstance(item, tuple) for data in [item[1]]]
    result = events[-1]
    assert "".join(chunks) == f"x{MARK}\n"
    assert not any(leaks(c) or TOKEN[:12] in c for c in chunks)
    assert result.output["stdout"] == f"x{MARK}\n"


def test_background_output_is_redacted(session):
    started = session.shell(
        'echo "early $GITHUB_TOKEN"; sleep 2; echo "ready $GITHUB_TOKEN"; sleep 30', background=True
    )
    assert started.output["stdout"] == f"early {MARK}\n", started
    handle = started.output["process_id"]
    read = session.call(
        "process_output", {"process_id": handle, "wait_for": "ready", "timeout_s": 20}
    )
    assert read.ok and f"ready {MARK}\n" in read.output["output"], read
    assert not leaks(read.output["output"])
    session.call("process_kill", {"process_id": handle})


def test_read_file_is_redacted_and_edit_file_keeps_the_value(session):
    session.shell('printf "user=me\\nkey=%s\\n" "$GITHUB_TOKEN" > conf.txt')
    read = session.call("read_file", {"path": "conf.txt"})
    assert read.output["content"] == f"user=me\nkey={MARK}\n"
    edited = session.call(
        "edit_file", {"path": "conf.txt", "old_string": "user=me", "new_string": "user=you"}
    )
    assert edited.ok and not leaks(edited.output["diff"]) and MARK in edited.output["diff"]
    # The file itself still holds the value: edits do not write the mark back.
    check = session.shell('grep -c "^key=$GITHUB_TOKEN$" conf.txt; grep -c REDACTED conf.txt')
    assert check.output["stdout"] == "1\n0\n"


def test_text_files_in_downloads_are_redacted_with_true_sizes(session):
    session.shell(
        'mkdir d; printf "token=%s\\n" "$GITHUB_TOKEN" > d/a.txt; '
        "printf '%s' \"$GITHUB_TOKEN\" | base64 > d/b64.txt; "
        "printf 'bin\\377%s' \"$GITHUB_TOKEN\" > d/blob.bin"
    )
    with tarfile.open(fileobj=io.BytesIO(session.download(["/workspace/d"]))) as tar:
        files = {
            m.name: (m.size, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()
        }
    size, text = files["d/a.txt"]
    assert text == f"token={MARK}\n".encode() and size == len(text)
    assert MARK.encode() in files["d/b64.txt"][1]
    # Not UTF-8: not a text file, so it travels as it is (README: what is redacted).
    assert TOKEN.encode() in files["d/blob.bin"][1]


def test_persisted_exports_keep_a_reference_not_the_value(daemon, session):
    set_it = session.shell('export AUTH="token $GITHUB_TOKEN"; export PLAIN=1', persist_env=True)
    assert set_it.ok, set_it
    state = daemon.daemon.core.manager.get("default", session.id).tool_state.shell
    assert state.env_set == {"AUTH": "token ${GITHUB_TOKEN}", "PLAIN": "1"}
    assert TOKEN not in repr(state)
    digest = hashlib.sha256(f"token {TOKEN}".encode()).hexdigest()
    out = session.shell('printf %s "$AUTH" | sha256sum; echo "$PLAIN"').output["stdout"]
    assert out == f"{digest}  -\n1\n"


def test_an_encoded_secret_is_not_persisted(daemon, session):
    result = session.shell('export B=$(printf %s "$GITHUB_TOKEN" | base64 -w0)', persist_env=True)
    assert "not kept for later calls: B" in result.output.get("note", ""), result
    state = daemon.daemon.core.manager.get("default", session.id).tool_state.shell
    assert "B" not in state.env_set


def test_unknown_and_forbidden_names_are_refused_before_a_container_starts(client):
    for names, code in (
        (["NOPE"], grpc.StatusCode.INVALID_ARGUMENT),
        (["AWS_KEY"], grpc.StatusCode.PERMISSION_DENIED),
    ):
        with pytest.raises(ToolrtRpcError) as caught:
            client.create_session(secrets=names)
        assert caught.value.code == code
        assert "aws-key-value" not in caught.value.details
