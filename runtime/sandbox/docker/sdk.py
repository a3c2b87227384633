"""The Docker SDK's private parts toolrt relies on, in one place.

docker-py offers no public way to do either of these, and both are what its
own public methods do inside (docker>=7.1 in pyproject.toml); a change of the
SDK that breaks one fails the Docker suite:

- `create_config`: `containers.run`'s translation of keyword arguments
  (volumes, tmpfs, log config...) into a create request, without creating
  (the backend edits the request: `StdinOnce`);
- `post_json`: a POST to an engine endpoint the SDK wraps too narrowly
  (`update_container` knows neither NanoCpus nor PidsLimit).
"""

from __future__ import annotations

from typing import Any

from docker.api import APIClient
from docker.models.containers import _create_container_args


def create_config(api: APIClient, kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(container name, create request) for `containers.run`-style `kwargs`."""
    args = _create_container_args({**kwargs, "version": api._version})
    name = args.pop("name")
    return name, api.create_container_config(**args)


def post_json(api: APIClient, path: str, *params: str, data: dict[str, Any]) -> Any:
    """POST `data` to the engine's `path` (its `{0}`... filled with `params`)."""
    return api._result(api._post_json(api._url(path, *params), data=data), json=True)
