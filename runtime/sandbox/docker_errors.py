"""Docker SDK errors → toolrt errors, in one place."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import docker.errors
import requests.exceptions

from runtime.errors import BadRequest, EngineUnavailable


@contextlib.contextmanager
def map_docker_errors(what: str) -> Iterator[None]:
    """Turn the SDK's exceptions during `what` into BadRequest/EngineUnavailable."""
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        msg = f"{what}: image not found on this host ({exc.explanation}); toolrt never pulls"
        raise BadRequest(msg) from exc
    except docker.errors.APIError as exc:
        text = str(exc.explanation or exc)
        if "executable file not found" in text or "no such file or directory" in text:
            msg = (
                f"{what}: the image has no python3 on its PATH, which toolrt's in-sandbox "
                f"agent needs ({text})"
            )
            raise BadRequest(msg) from exc
        if exc.status_code is not None and exc.status_code < 500 and exc.status_code != 409:
            msg = f"{what}: Docker refused the request: {text}"
            raise BadRequest(msg) from exc
        msg = f"{what}: Docker engine error: {text}"
        raise EngineUnavailable(msg) from exc
    except (requests.exceptions.ConnectionError, docker.errors.DockerException) as exc:
        msg = f"{what}: the Docker engine does not answer ({exc}); is dockerd running?"
        raise EngineUnavailable(msg) from exc
    except requests.exceptions.Timeout as exc:
        msg = f"{what}: the Docker engine did not answer in time"
        raise EngineUnavailable(msg) from exc
