"""The platform wheel (`make wheel`) carries the static agent and its helper:
installed with `pip install --no-deps --target` and imported from there (not
from this checkout), it serves sessions with `agent = "static"` on a host
whose PATH has no C compiler, after an install that left spawn.c newer than
the helper built from it."""

from __future__ import annotations

import os
import platform
import signal
import sys
import time
import uuid
import zipfile
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.sandbox.agent_dir import HELPER, HELPER_SOURCE, HELPER_STAMP, STATIC_AGENT
from tests.conftest import TEST_LABEL
from tests.helpers import DaemonProcess, containers_of, free_port, run

pytestmark = [pytest.mark.docker, pytest.mark.static_agent]
ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
PLATFORM = f"manylinux2014_{platform.machine()}"
BINARIES = (f"runtime/agent/{STATIC_AGENT}", f"runtime/agent/{HELPER}")


def _newest_input() -> float:
    """The mtime of the newest file the wheel is built from."""
    files = [ROOT / "pyproject.toml"]
    files += [
        p for p in (ROOT / "runtime").rglob("*") if p.is_file() and "__pycache__" not in p.parts
    ]
    return max(p.stat().st_mtime for p in files)


@pytest.fixture(scope="module")
def wheel() -> Path:
    """dist/'s platform wheel, built again by `make wheel` unless it is newer than the tree."""
    pattern = f"toolrt-*-py3-none-{PLATFORM}.whl"
    built = sorted(DIST.glob(pattern), key=lambda p: p.stat().st_mtime)
    if not built or built[-1].stat().st_mtime < _newest_input():
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRT_")}
        run("make", "--no-print-directory", "wheel", cwd=ROOT, env=env, timeout=600)
        built = list(DIST.glob(pattern))  # the one `make wheel` left
    return built[-1]


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("installed")
    run(
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--target",
        target,
        wheel,
        cwd=target,
    )
    return target


def test_the_wheel_is_tagged_for_the_platform_and_carries_both_binaries(wheel: Path) -> None:
    assert wheel.name.endswith(f"-py3-none-{PLATFORM}.whl")
    with zipfile.ZipFile(wheel) as archive:
        modes = {i.filename: i.external_attr >> 16 for i in archive.infolist()}
        assert "Tag: py3-none-" + PLATFORM in archive.read("toolrt-0.1.0.dist-info/WHEEL").decode()
    for name in BINARIES:
        assert modes[name] & 0o777 == 0o755
    assert f"runtime/agent/{HELPER_STAMP}" in modes and "runtime/agent/interpreter.py" in modes


@pytest.mark.timeout(300)
def test_an_installed_wheel_serves_the_static_agent_without_compiling(
    installed: Path, docker_client, tmp_path: Path
) -> None:
    package = installed / "runtime" / "agent"
    for name in (STATIC_AGENT, HELPER):
        assert (package / name).stat().st_mode & 0o777 == 0o755
    # Installs set mtimes in any order: spawn.c newer than the helper built from it.
    later = time.time() + 60
    os.utime(package / HELPER_SOURCE, (later, later))
    no_compiler = tmp_path / "bin"
    no_compiler.mkdir()
    env = {"PYTHONPATH": str(installed), "PATH": str(no_compiler)}
    cwd = tmp_path  # outside the checkout: the installed copy is what imports
    imported = run(
        sys.executable,
        "-c",
        "import runtime; print(runtime.__file__)",
        cwd=cwd,
        env={**os.environ, **env},
    )
    assert Path(imported.stdout.strip()).is_relative_to(installed)

    instance = f"test-wheel-static-{uuid.uuid4().hex[:8]}"
    agent_dir = tmp_path / "agent"
    config = tmp_path / "toolrt.toml"
    config.write_text(
        f'agent = "static"\nagent_dir = "{agent_dir}"\n[extra_labels]\n"{TEST_LABEL}" = "1"\n'
    )
    log_path = tmp_path / "serve.log"
    daemon = DaemonProcess(
        instance,
        free_port(),
        log_path,
        state_dir=tmp_path / "state",
        config=config,
        env=env,
        cwd=cwd,
    )
    try:
        with Client(daemon.target) as client, client.session() as session:
            (container,) = containers_of(docker_client, instance)
            assert container.attrs["Path"].endswith(f"/{STATIC_AGENT}")
            shell = session.shell("echo from-the-wheel")
            assert shell.output["stdout"] == "from-the-wheel\n", shell
            ran = session.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
            assert (ran.stdout, ran.stderr, ran.exit_code) == (b"out\n", b"err\n", 3)
        # The helper sandboxes used is the one the wheel shipped, not one built here.
        assert (agent_dir / HELPER).read_bytes() == (package / HELPER).read_bytes()
        assert "built the agent's native helper" not in daemon.log()
    finally:
        daemon.proc.send_signal(signal.SIGTERM)
        try:
            daemon.proc.wait(60)
        finally:
            for left in containers_of(docker_client, instance):
                left.remove(force=True)
    assert daemon.proc.returncode == 0, daemon.log()[-3000:]
