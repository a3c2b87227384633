"""The agent's directory as sandboxes mount it: copied where `agent_dir` says,
the native helper built from the packaged source when a compiler exists, and
the Python spawn path otherwise."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from runtime import agent as agent_package
from runtime.sandbox import agent_dir
from runtime.sandbox.agent_dir import HELPER, HELPER_SOURCE, prepare

SOURCE = Path(agent_package.__file__).resolve().parent


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A copy of the agent package as a wheel installs it: Python files and spawn.c only."""
    copy = tmp_path / "site-packages" / "agent"
    copy.mkdir(parents=True)
    for path in SOURCE.iterdir():
        if path.suffix == ".py" or path.name == HELPER_SOURCE:
            shutil.copy2(path, copy / path.name)
    return copy


@pytest.mark.skipif(agent_dir.compiler() == "", reason="no C compiler on this host")
def test_the_helper_is_built_static_in_the_package_directory(package):
    assert not (package / HELPER).exists()
    assert prepare(package) == str(package)
    helper = package / HELPER
    assert helper.stat().st_mode & stat.S_IXOTH
    described = subprocess.run(["file", str(helper)], capture_output=True, text=True).stdout
    assert "statically linked" in described or not described
    built = helper.stat().st_mtime
    prepare(package)  # up to date: left alone
    assert helper.stat().st_mtime == built
    os.utime(package / HELPER_SOURCE, (built + 10, built + 10))
    prepare(package)  # the source changed: built again
    assert helper.stat().st_mtime > built


def test_agent_dir_gets_a_world_readable_copy_kept_in_step(package, tmp_path):
    target = tmp_path / "state" / "agent"
    assert prepare(package, str(target)) == str(target)
    names = {p.name for p in package.iterdir() if p.suffix == ".py"}
    assert names <= {p.name for p in target.iterdir()}
    for name in names:
        assert (target / name).read_bytes() == (package / name).read_bytes()
        assert (target / name).stat().st_mode & 0o777 == 0o644
    assert target.stat().st_mode & 0o777 == 0o755
    # A file the package no longer has goes; a changed one is replaced.
    (target / "gone.py").write_text("")
    (package / "main.py").write_text((package / "main.py").read_text() + "\n# changed\n")
    prepare(package, str(target))
    assert not (target / "gone.py").exists()
    assert (target / "main.py").read_text().endswith("# changed\n")
    assert (target / "__pycache__").is_dir()  # byte-compiled where sandboxes read it


def test_without_a_compiler_the_python_spawn_path_is_left(package, monkeypatch, caplog):
    monkeypatch.setenv("PATH", "/nonexistent")
    caplog.set_level("INFO", logger="runtime.sandbox.agent_dir")
    prepare(package)
    assert not (package / HELPER).exists()
    assert "Python spawn path" in caplog.text
