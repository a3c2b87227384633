"""The local backend runs the static agent when the config names it: the same
binary Docker sandboxes mount, PID 1 of the local sandbox, serving tools,
programs and files; and a clear refusal when it was not built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.client import Client
from runtime.config import Config
from runtime.errors import ConfigurationError
from runtime.sandbox.agent_dir import STATIC_AGENT
from runtime.sandbox.local import LocalBackend


def test_the_local_backend_runs_the_static_agent(make_daemon: Any) -> None:
    daemon = make_daemon(backend="local", agent="static")
    with Client(daemon.target) as client, client.session() as session:
        argv = session.exec(["cat", "/proc/1/cmdline"]).stdout
        assert argv == f"/opt/toolrt/agent/{STATIC_AGENT}\0".encode(), argv
        result = session.shell("cd /tmp && export KEPT=1 && echo hi", persist_env=True)
        assert result.output["stdout"] == "hi\n", result
        assert session.shell("pwd; echo $KEPT").output["stdout"] == "/tmp\n1\n"
        session.write_file_bytes("/workspace/f.bin", bytes(range(256)))
        assert session.read_file_bytes("/workspace/f.bin") == bytes(range(256))
        listed = session.call("list_files", {"path": "/workspace"})
        assert listed.ok and "f.bin" in str(listed.output), listed
        echoed = session.exec(["cat"], stdin=b"\x00\xffbytes")
        assert echoed.exit_code == 0 and echoed.stdout == b"\x00\xffbytes", echoed


def test_without_the_static_agent_the_local_backend_says_how_to_build_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("runtime.sandbox.local.prepare_agent_dir", lambda: str(tmp_path))
    with pytest.raises(ConfigurationError, match="make agent"):
        LocalBackend(Config(agent="static"))
