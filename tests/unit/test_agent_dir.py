"""The agent's directory as sandboxes mount it: copied where `agent_dir` says,
the native helper built from the packaged source when a compiler exists (or
taken as shipped, whatever the install did to mtimes), and the Python spawn
path otherwise."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from runtime import agent as agent_package
from runtime.errors import ConfigurationError
from runtime.sandbox import agent_dir
from runtime.sandbox.agent_dir import (
    HELPER,
    HELPER_SOURCE,
    HELPER_STAMP,
    STATIC_AGENT,
    prepare,
    require_static_agent,
)

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
    prepare(package)  # only touched: still the source it was built from
    assert helper.stat().st_mtime == built
    with (package / HELPER_SOURCE).open("a") as source:
        source.write("/* changed */\n")
    prepare(package)  # the source changed: built again
    assert helper.stat().st_mtime > built


@pytest.mark.skipif(shutil.which("musl-gcc") is None, reason="no musl-gcc on this host")
def test_where_musl_is_installed_the_launcher_is_its_small_static_build(package):
    prepare(package)
    helper = package / HELPER
    described = subprocess.run(["file", str(helper)], capture_output=True, text=True).stdout
    assert "statically linked" in described or not described
    # glibc's static build of the same source is about 750 KB.
    assert helper.stat().st_size < 100_000
    assert subprocess.run([str(helper)], stdin=subprocess.DEVNULL, check=False).returncode == 127


@pytest.mark.skipif(agent_dir.compiler() == "", reason="no C compiler on this host")
def test_a_musl_build_that_fails_falls_back_to_the_c_compiler(package, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    broken = bin_dir / "musl-gcc"
    broken.write_text("#!/bin/sh\necho 'fatal error: linux/capability.h' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert prepare(package) == str(package)
    helper = package / HELPER
    assert helper.is_file() and os.access(helper, os.X_OK)
    assert (package / HELPER_STAMP).read_text() == agent_dir._source_digest(package)


@pytest.mark.skipif(agent_dir.compiler() == "", reason="no C compiler on this host")
def test_make_helper_builds_the_launcher_and_its_stamp_even_when_they_look_current(package):
    assert agent_dir.main([str(package)]) == 0  # what `make helper` runs
    helper = package / HELPER
    assert (package / HELPER_STAMP).read_text() == agent_dir._source_digest(package)
    os.utime(helper, (1, 1))
    assert agent_dir.main([str(package)]) == 0
    assert helper.stat().st_mtime > 1  # built again, not left as current


@pytest.fixture
def shipped(package: Path) -> Path:
    """The package as the platform wheel installs it: the helper, its stamp and
    the static agent beside the source, every mtime older than spawn.c's."""
    assert (SOURCE / HELPER_STAMP).is_file(), "`make helper` builds the helper and its stamp"
    for name in (HELPER, HELPER_STAMP, STATIC_AGENT):
        shutil.copy2(SOURCE / name, package / name)
        os.utime(package / name, (1, 1))
    return package


def test_a_shipped_helper_is_used_without_a_compiler_whatever_its_mtime(
    shipped, tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv("PATH", "/nonexistent")
    caplog.set_level("INFO", logger="runtime.sandbox.agent_dir")
    target = tmp_path / "state" / "agent"
    prepare(shipped, str(target))
    assert (target / HELPER).read_bytes() == (shipped / HELPER).read_bytes()
    assert os.access(target / HELPER, os.X_OK)
    require_static_agent(str(target))  # agent = "static" can start
    assert "built" not in caplog.text


@pytest.mark.skipif(agent_dir.compiler() == "", reason="no C compiler on this host")
def test_a_shipped_helper_is_not_built_again_where_a_compiler_exists(shipped, caplog):
    caplog.set_level("INFO", logger="runtime.sandbox.agent_dir")
    prepare(shipped)
    assert (shipped / HELPER).stat().st_mtime == 1
    assert "built the agent's native helper" not in caplog.text


def test_a_missing_static_agent_refuses_the_start_and_says_where_to_get_it(package):
    with pytest.raises(ConfigurationError) as refused:
        require_static_agent(str(package))
    message = str(refused.value)
    assert f"has no {STATIC_AGENT} and no {HELPER}" in message
    assert "make wheel" in message and "make agent" in message


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
    (package / "interpreter.py").write_text(
        (package / "interpreter.py").read_text() + "\n# changed\n"
    )
    prepare(package, str(target))
    assert not (target / "gone.py").exists()
    assert (target / "interpreter.py").read_text().endswith("# changed\n")
    assert (target / "__pycache__").is_dir()  # byte-compiled where sandboxes read it


def test_without_a_compiler_the_launcher_is_missing_and_the_start_refused(
    package, monkeypatch, caplog
):
    monkeypatch.setenv("PATH", "/nonexistent")
    caplog.set_level("INFO", logger="runtime.sandbox.agent_dir")
    prepare(package)
    assert not (package / HELPER).exists()
    assert "cannot be built here" in caplog.text
    with pytest.raises(ConfigurationError, match=f"no {HELPER}"):
        require_static_agent(str(package))
