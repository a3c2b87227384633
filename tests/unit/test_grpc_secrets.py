"""Secrets without an engine: the secrets file's checks, the names a session
may ask for, and values kept out of answers, `Session`, logs and audit (on the
fake backend: what the agent does with them is tested on the real engine)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import grpc
import pytest

from runtime.agent import protocol
from runtime.client import Client
from runtime.config import Config
from runtime.core import build_core
from runtime.errors import ConfigurationError
from runtime.sandbox.fake import FakeBackend
from runtime.secret_store import load_secrets
from tests.unit.secured import status_of

TOKEN = "ghp_unitTOKEN0123456789abcdef"


def secrets_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "secrets.env"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_secrets_file_is_read_as_name_value_lines(tmp_path):
    path = secrets_file(tmp_path, f"# comment\n\nGITHUB_TOKEN={TOKEN}\nPW=a=b c \n")
    assert load_secrets(str(path)) == {"GITHUB_TOKEN": TOKEN, "PW": "a=b c "}
    assert load_secrets("") == {}


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o400, 0o700])
def test_a_secrets_file_others_could_read_is_refused(tmp_path, mode):
    path = secrets_file(tmp_path, f"A={TOKEN}\n", mode)
    with pytest.raises(
        ConfigurationError, match=f"secrets_file {path}: mode is 0{mode:o}, expected 0600"
    ):
        load_secrets(str(path))


def test_a_secrets_file_of_another_user_is_refused(tmp_path):
    path = secrets_file(tmp_path, f"A={TOKEN}\n")
    if os.geteuid() != 0:
        pytest.fail("changing the file's owner needs root (the fast suite runs as root)")
    os.chown(path, 1234, 1234)
    with pytest.raises(ConfigurationError, match=f"{path}: owned by uid 1234, expected the daemon"):
        load_secrets(str(path))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("no equals\n", "line 1: expected NAME=value"),
        ("1A=xyzw\n", "expected NAME"),
        ("A=ab\n", "at least 4 bytes"),
        ("A=abcd\nA=efgh\n", "line 2: A is defined twice"),
    ],
)
def test_a_malformed_secrets_file_says_which_line(tmp_path, text, problem):
    with pytest.raises(ConfigurationError, match=problem) as caught:
        load_secrets(str(secrets_file(tmp_path, text)))
    assert "abcd" not in str(caught.value) and "efgh" not in str(caught.value)


def test_the_daemon_refuses_to_start_on_a_missing_or_open_secrets_file(tmp_path):
    for path in (tmp_path / "missing", secrets_file(tmp_path, f"A={TOKEN}\n", 0o644)):
        with pytest.raises(ConfigurationError, match=f"secrets_file {path}"):
            build_core(Config(secrets_file=str(path)), backend=FakeBackend())


def test_names_are_checked_and_values_never_leave_the_agent(secure_daemon, tmp_path, caplog):
    path = secrets_file(tmp_path, f"GITHUB_TOKEN={TOKEN}\nAWS_KEY=aws-key-value\n")
    secured = secure_daemon(
        secrets_file=str(path), tenants={"alice": {"secrets": ["GITHUB_TOKEN"]}}
    )
    alice, bob = secured.client("alice"), secured.client("bob")
    unknown = status_of(lambda: alice.create_session(secrets=["NOPE"]))
    assert unknown is not None and unknown[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown secret(s) NOPE" in unknown[1] and TOKEN not in unknown[1]
    denied = status_of(lambda: alice.create_session(secrets=["AWS_KEY"]))
    assert denied is not None and denied[0] == grpc.StatusCode.PERMISSION_DENIED
    assert "may not use secret(s) AWS_KEY" in denied[1]
    caplog.set_level(logging.DEBUG)
    session = alice.create_session(secrets=["GITHUB_TOKEN"])
    assert list(session.secrets) == ["GITHUB_TOKEN"]
    assert list(alice.get_session(session.id).secrets) == ["GITHUB_TOKEN"]
    # A tenant without a `secrets` key may request any name the file has.
    assert list(bob.create_session(secrets=["AWS_KEY"]).secrets) == ["AWS_KEY"]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for value in (TOKEN, "aws-key-value"):
        assert value not in secured.audit_file.read_text()
        assert value not in logged
        assert value not in str(session) + str(alice.list_sessions())


def test_the_daemon_redacts_whatever_the_sandbox_sends_back(make_daemon, tmp_path):
    # A sandbox that redacts nothing (the fake): whatever a call's result,
    # failure or streamed chunks carry, the daemon's edge replaces the value.
    path = secrets_file(tmp_path, f"GITHUB_TOKEN={TOKEN}\n")
    running = make_daemon(backend="fake", secrets_file=str(path))
    backend = running.daemon.core.backend

    def answer(request: protocol.Exec) -> Any:
        if "fail" in request.command:
            return protocol.Failure(code=protocol.NOT_FOUND, message=f"/workspace/{TOKEN}: gone")
        return protocol.ExecResult(exit_code=0), f"out {TOKEN}\n".encode(), TOKEN[:9].encode()

    backend.script(answer)
    mark = "[REDACTED:GITHUB_TOKEN]"
    with Client(running.target) as client, client.session(secrets=["GITHUB_TOKEN"]) as session:
        ran = session.shell("echo")
        failed = session.shell("fail")
        events = list(client.stream(session.id, "shell", {"command": "echo"}))
    assert ran.output["stdout"] == f"out {mark}\n" and ran.output["stderr"] == TOKEN[:9]
    assert not failed.ok and failed.error_message == f"/workspace/{mark}: gone"
    chunks = b"".join(data for item in events if isinstance(item, tuple) for data in [item[1]])
    assert TOKEN.encode() not in chunks and f"out {mark}\n".encode() in chunks
    assert events[-1].output == ran.output
