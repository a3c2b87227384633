"""Installable anywhere: the wheel built from a clean tree (no Go, no `make
agent`) in a fresh venv in a temporary directory carries the helper's source,
the python tool's interpreter and the image recipe but no agent binary: its
daemon refuses to start and says where to get one; given the agent `make
agent` built, it serves a session from there, warm by default, with its
helper built at first start. (The platform wheel that carries both binaries:
test_wheel_static_agent.py.)"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.images import RECIPE_DIR
from runtime.sandbox.agent_dir import STATIC_AGENT
from tests.helpers import containers_of, copy_tracked_tree, free_port, run, wait_for

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv (in a temporary directory) with the wheel built from this tree installed."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    copy_tracked_tree(source)
    run(
        sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "dist", source, cwd=tmp
    )
    (wheel,) = (tmp / "dist").glob("toolrt-*.whl")
    run(sys.executable, "-m", "venv", tmp / "venv", cwd=tmp)
    run(tmp / "venv" / "bin" / "python", "-m", "pip", "install", "-q", wheel, cwd=tmp, timeout=600)
    return wheel


@pytest.mark.timeout(900)
def test_the_wheel_carries_the_agent_the_helper_source_and_the_recipe(installed):
    names = set(zipfile.ZipFile(installed).namelist())
    for expected in (
        "runtime/agent/interpreter.py",
        "runtime/agent/protocol.py",
        "runtime/agent/spawn.c",
    ):
        assert expected in names
    recipe = {f"runtime/images/default/{p.name}" for p in RECIPE_DIR.iterdir()}
    assert recipe <= names and "runtime/images/default/Dockerfile.offline" in recipe
    # From a clean tree (no `make agent`): no binary, so a pure wheel; `make
    # wheel` builds the platform one that carries them (test_wheel_static_agent.py).
    assert not [n for n in names if n.endswith(("toolrt-spawn", "toolrt-agent"))]
    assert installed.name.endswith("-py3-none-any.whl")


@pytest.mark.timeout(900)
def test_a_session_through_the_installed_wheel_from_any_directory(
    installed, docker_client, tmp_path
):
    venv_bin = installed.parent.parent / "venv" / "bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLRT_", "PYTHON"))}
    env["PATH"] = f"{venv_bin}:{env['PATH']}"
    # The recipe in the wheel is this tree's: the image `make image` built is up to date.
    tag = f"toolrt-wheel-test:{uuid.uuid4().hex[:8]}"
    built = run(venv_bin / "toolrt", "image", "build", "--tag", tag, cwd=tmp_path, env=env)
    assert "is up to date" in built.stderr
    docker_client.images.remove(tag)

    instance = f"test-wheel-{uuid.uuid4().hex[:8]}"
    target = f"127.0.0.1:{free_port()}"
    agent_dir = tmp_path / "agent"
    config = tmp_path / "toolrt.toml"
    config.write_text(
        f'listen = "{target}"\ninstance = "{instance}"\nagent_dir = "{agent_dir}"\n'
        f'state_dir = "{tmp_path / "state"}"\nshutdown = "close"\n'
        '[extra_labels]\n"toolrt.test" = "1"\n'
    )
    env_client = {**env, "TOOLRT_TARGET": target}
    refused = subprocess.run(
        [venv_bin / "toolrt", "serve", "--config", config],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode != 0
    assert "the in-sandbox agent is missing" in refused.stderr and "make wheel" in refused.stderr
    # The agent `make agent` built (what the platform wheel would carry).
    shutil.copy2(ROOT / "runtime" / "agent" / STATIC_AGENT, agent_dir / STATIC_AGENT)
    log = (tmp_path / "serve.log").open("w")
    daemon = subprocess.Popen(
        [venv_bin / "toolrt", "serve", "--config", config],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        with Client(target) as client:
            # Warm by default: one container waits before anyone asks.
            wait_for(lambda: _warm(client), timeout=60)
            first = run(
                venv_bin / "toolrt",
                "run",
                "--",
                "echo from-the-wheel",
                cwd=tmp_path,
                env=env_client,
            )
            assert first.stdout.strip() == "from-the-wheel"
            stats = client.admin_stats()
            assert stats.sessions_created["pool"] == 1
            assert stats.engine.startswith("docker ")
        status = run(venv_bin / "toolrt", "status", cwd=tmp_path, env=env_client)
        assert status.stdout.splitlines()[0].endswith(": healthy")
        # The agent was copied to agent_dir, with its helper built from the packaged source.
        assert (agent_dir / "interpreter.py").is_file()
        assert os.access(agent_dir / "toolrt-spawn", os.X_OK)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
        log.close()
    assert daemon.returncode == 0, (tmp_path / "serve.log").read_text()[-3000:]
    assert containers_of(docker_client, instance) == []


def _warm(client: Client) -> bool:
    try:
        return sum(p.ready for p in client.admin_stats().pool) >= 1
    except Exception:  # noqa: BLE001 - not serving yet
        return False
