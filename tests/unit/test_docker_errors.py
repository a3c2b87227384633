"""The Docker error table (runtime/sandbox/docker/errors.py), without an engine."""

from __future__ import annotations

import asyncio
import socket

import docker.errors
import pytest
import requests

from runtime.errors import BadRequest, EngineUnavailable, SandboxLost
from runtime.sandbox.docker import errors
from runtime.sandbox.docker.attach import open_attach

WHAT = "create sandbox s1"


def response(status: int) -> requests.Response:
    answer = requests.Response()
    answer.status_code = status
    return answer


def api_error(status: int | None, explanation: str) -> docker.errors.APIError:
    answer = response(status) if status is not None else None
    return docker.errors.APIError("engine said no", response=answer, explanation=explanation)


def mapped(exc: BaseException) -> BaseException:
    with pytest.raises((BadRequest, EngineUnavailable)) as caught, errors.map_docker_errors(WHAT):
        raise exc
    assert caught.value.__cause__ is exc
    assert str(caught.value).startswith(f"{WHAT}: ")
    return caught.value


@pytest.mark.parametrize(
    ("exc", "cls", "text"),
    [
        (
            docker.errors.ImageNotFound("x", response=response(404), explanation="No such image"),
            BadRequest,
            "image not found on this host (No such image); toolrt never pulls",
        ),
        (
            api_error(400, 'exec: "python3": executable file not found in $PATH'),
            BadRequest,
            "the sandbox's agent could not start in this image",
        ),
        (
            api_error(500, "OCI runtime create failed: no such file or directory"),
            BadRequest,
            "the sandbox's agent could not start in this image",
        ),
        (api_error(400, "invalid mount config"), BadRequest, "Docker refused the request"),
        (api_error(404, "No such container: toolrt-s1"), BadRequest, "Docker refused"),
        (api_error(409, "removal already in progress"), EngineUnavailable, "engine error"),
        (api_error(500, "driver failed"), EngineUnavailable, "Docker engine error: driver failed"),
        (api_error(None, ""), EngineUnavailable, "Docker engine error: engine said no"),
        (
            requests.exceptions.ConnectionError("refused"),
            EngineUnavailable,
            "the Docker engine does not answer (refused); is dockerd running?",
        ),
        (
            docker.errors.DockerException("Error while fetching server API version"),
            EngineUnavailable,
            "does not answer",
        ),
        (requests.exceptions.ReadTimeout("slow"), EngineUnavailable, "did not answer in time"),
        (requests.exceptions.ConnectTimeout("slow"), EngineUnavailable, "does not answer"),
    ],
)
def test_sdk_errors(exc, cls, text):
    error = mapped(exc)
    assert type(error) is cls
    assert text in str(error)


def test_other_exceptions_pass_through_untouched():
    with pytest.raises(KeyError), errors.map_docker_errors(WHAT):
        raise KeyError


def test_a_missing_engine_socket(tmp_path):
    path = str(tmp_path / "docker.sock")
    with pytest.raises(EngineUnavailable, match="no Docker engine socket at .*docker.sock"):
        errors.require_engine_socket(WHAT, path)
    (tmp_path / "docker.sock").touch()
    errors.require_engine_socket(WHAT, path)


def test_an_engine_call_past_its_deadline():
    with (
        pytest.raises(EngineUnavailable, match="did not answer within 3.0 s"),
        errors.map_engine_timeout(WHAT, 3.0),
    ):
        raise TimeoutError


@pytest.mark.parametrize(
    "head",
    [b"HTTP/1.1 101 UPGRADED\r\nContent-Type: x\r\n\r\n", b"HTTP/1.1 200 OK\r\n\r\n"],
)
def test_an_attach_that_switched_protocols(head):
    errors.check_attach_status(WHAT, head)


def test_an_attach_refused():
    head = b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n\r\n"
    with pytest.raises(EngineUnavailable) as caught:
        errors.check_attach_status(WHAT, head)
    assert str(caught.value) == f"{WHAT}: attach to the sandbox failed: HTTP/1.1 404 Not Found"


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (TimeoutError(), "the Docker engine did not answer within 2 s"),
        (ConnectionRefusedError(111, "Connection refused"), "ConnectionRefusedError"),
        (FileNotFoundError(2, "No such file"), "FileNotFoundError"),
        (asyncio.IncompleteReadError(b"HTTP/1.1", None), "IncompleteReadError"),
        (asyncio.LimitOverrunError("too long", 10), "LimitOverrunError"),
    ],
)
def test_attach_errors(exc, text):
    with pytest.raises(EngineUnavailable, match=text), errors.map_attach_errors(WHAT, 2):
        raise exc


def test_attach_to_an_engine_that_is_not_there(tmp_path):
    async def attach() -> None:
        await open_attach(str(tmp_path / "none.sock"), "1.41", "c1", WHAT, 1)

    with pytest.raises(EngineUnavailable, match="attach to the sandbox failed"):
        asyncio.run(attach())


def test_attach_to_an_engine_that_refuses(tmp_path):
    path = str(tmp_path / "engine.sock")

    async def attach() -> None:
        async def engine(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\n\r\n")
            await writer.drain()
            writer.close()

        server = await asyncio.start_unix_server(engine, path)
        async with server:
            await open_attach(path, "1.41", "c1", WHAT, 5)

    with pytest.raises(EngineUnavailable, match="500 Internal Server Error"):
        asyncio.run(attach())
    with socket.socket(socket.AF_UNIX) as probe:
        assert probe.connect_ex(path) != 0  # the test engine is gone again


@pytest.mark.parametrize(
    ("state", "by_itself"),
    [
        ({"Running": False, "ExitCode": 127, "OOMKilled": False}, True),
        ({"Running": False, "ExitCode": 1}, True),
        ({"Running": False, "ExitCode": 137}, False),
        ({"Running": False, "ExitCode": 143}, False),
        ({"Running": False, "ExitCode": 0, "OOMKilled": True}, False),
        ({"Running": True, "ExitCode": 0}, False),
    ],
)
def test_which_container_ended_by_itself(state, by_itself):
    assert errors.exited_by_itself(state) is by_itself


def agent_start(exc: BaseException, ended: bool) -> BaseException:
    async def check() -> bool:
        return ended

    async def run() -> None:
        async with errors.map_agent_start(WHAT, "img:1", 30, check):
            raise exc

    with pytest.raises((BadRequest, EngineUnavailable)) as caught:
        asyncio.run(run())
    return caught.value


def test_an_agent_that_exited_at_start_is_a_bad_image():
    error = agent_start(SandboxLost("stopped answering"), ended=True)
    assert isinstance(error, BadRequest)
    assert "exited at start-up in the image 'img:1'" in str(error)


def test_a_sandbox_stopped_while_starting_is_unavailable():
    error = agent_start(SandboxLost("stopped answering"), ended=False)
    assert isinstance(error, EngineUnavailable)
    assert "stopped or removed while it started" in str(error)


def test_an_agent_that_never_says_hello_is_unavailable():
    error = agent_start(TimeoutError(), ended=True)
    assert isinstance(error, EngineUnavailable)
    assert "did not answer within 30 s" in str(error)


@pytest.mark.parametrize(
    "exc",
    [
        docker.errors.NotFound("gone", response=response(404)),
        api_error(409, "removal of container toolrt-s1 is already in progress"),
    ],
)
def test_removing_what_is_gone_or_going_is_no_error(exc):
    with errors.tolerate_gone() as removal:
        raise exc
    # Only someone else's removal in progress is worth waiting for.
    assert removal.in_progress is (getattr(exc, "status_code", None) == 409)


def test_a_removal_that_went_through_waits_for_nothing():
    with errors.tolerate_gone() as removal:
        pass
    assert removal.in_progress is False


def test_other_removal_errors_still_count():
    with pytest.raises(docker.errors.APIError), errors.tolerate_gone():
        raise api_error(500, "device busy")
