"""The agent's directory as sandboxes mount it, with the native helper built in it.

The package carries the static agent (`toolrt-agent`, built by `make agent`
or shipped in the platform wheel), the C source of the launcher it starts
every command with (`spawn.c`) and the Python files sandboxes run (the python
tool's interpreter). At start-up the daemon readies the directory its
sandboxes bind-mount read-only:
- with `agent_dir` set, the agent's files are copied there first (only what
  changed; files the package no longer has are removed), so the mount source
  can be a path the host and a containerised daemon share;
- the helper (`toolrt-spawn`) is compiled there, static so it runs in any
  image, when it is missing or was built from another `spawn.c` (its stamp,
  `toolrt-spawn.sha256`, holds the source's digest) and a C compiler exists
  (musl-gcc first, then the first of COMPILERS);
  a wheel built by `make wheel` ships both, so such hosts compile nothing;
  without one the daemon refuses to start (`require_static_agent`);
- it is byte-compiled in place, so no sandbox compiles the interpreter anew.
Everything is written to a temporary name and renamed, so daemons starting
at once never see half a file.
"""

from __future__ import annotations

import compileall
import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from runtime.errors import ConfigurationError

log = logging.getLogger(__name__)

HELPER = "toolrt-spawn"
HELPER_SOURCE = "spawn.c"
# The sha256 of the spawn.c the helper was built from (written by `make
# helper` and by build_helper): staleness by content, because installs (pip,
# distribution packages) set the files' mtimes in any order.
HELPER_STAMP = "toolrt-spawn.sha256"
# The static agent (static-agent/, Go), built by `make agent`; copied like
# the rest, never built here (hosts have no Go).
STATIC_AGENT = "toolrt-agent"
COMPILERS = ("cc", "gcc", "clang")
# Tried first when on PATH: a musl static launcher is 25 KB against glibc's
# 750 KB and costs about 0.17 ms less CPU on every command it starts
# (glibc's static start-up probes the CPU). The kernel's headers (linux/*)
# come from the host's include directories, which musl's own do not search.
MUSL_COMPILER = "musl-gcc"
FLAGS = ("-O2", "-Wall", "-Wextra", "-static")
COMPILE_TIMEOUT_S = 120


def _replace(target: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        # World-readable: root in the sandbox has no DAC_OVERRIDE.
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def sync_agent(source: Path, target: Path) -> None:
    """Make `target` hold the agent files of `source` (its helper too, when built)."""
    target.mkdir(parents=True, exist_ok=True)
    os.chmod(target, 0o755)
    wanted = {p.name: p for p in source.iterdir() if p.suffix == ".py" or p.name == HELPER_SOURCE}
    helper = source / HELPER
    if helper.is_file() and not _stale(source):
        wanted[HELPER] = helper
        if (source / HELPER_STAMP).is_file():
            wanted[HELPER_STAMP] = source / HELPER_STAMP
    if (source / STATIC_AGENT).is_file():
        wanted[STATIC_AGENT] = source / STATIC_AGENT
    for name, path in wanted.items():
        data = path.read_bytes()
        here = target / name
        if not here.is_file() or here.read_bytes() != data:
            _replace(here, data, 0o755 if name in (HELPER, STATIC_AGENT) else 0o644)
    for old in target.iterdir():
        if old.suffix == ".py" and old.name not in wanted:
            old.unlink()


def _source_digest(agent_dir: Path) -> str:
    return hashlib.sha256((agent_dir / HELPER_SOURCE).read_bytes()).hexdigest()


def _stale(agent_dir: Path) -> bool:
    """Whether the helper is missing or its stamp names another source than
    the spawn.c beside it (no stamp: stale)."""
    if not (agent_dir / HELPER).is_file():
        return True
    if not (agent_dir / HELPER_SOURCE).is_file():
        return False
    try:
        built_from = (agent_dir / HELPER_STAMP).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return True
    return built_from != _source_digest(agent_dir)


def compiler() -> str:
    """The first C compiler on PATH ("" when there is none)."""
    for name in COMPILERS:
        found = shutil.which(name)
        if found:
            return found
    return ""


def compile_commands(source: Path, out: Path) -> list[list[str]]:
    """How to build the helper, in the order to try: musl's static build
    where musl-gcc is installed, then the first C compiler's."""
    commands = []
    musl = shutil.which(MUSL_COMPILER)
    if musl:
        headers = ["-idirafter", "/usr/include"]
        multiarch = sysconfig.get_config_var("MULTIARCH")
        if multiarch:
            headers += ["-idirafter", f"/usr/include/{multiarch}"]
        commands.append([musl, *FLAGS, "-s", *headers, "-o", str(out), str(source)])
    cc = compiler()
    if cc:
        commands.append([cc, *FLAGS, "-o", str(out), str(source)])
    return commands


def _compiled(command: list[str]) -> str:
    """Why `command` did not build the helper ("" once it has)."""
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
    return ""


def build_helper(agent_dir: Path) -> bool:
    """Compile the helper in `agent_dir` when it is stale; whether one is there after."""
    source = agent_dir / HELPER_SOURCE
    if not _stale(agent_dir):
        return True
    with tempfile.TemporaryDirectory(prefix="toolrt-helper-") as tmp:
        out = Path(tmp) / HELPER
        commands = compile_commands(source, out) if source.is_file() else []
        if not commands:
            log.info("no C compiler (or no %s): the launcher cannot be built here", HELPER_SOURCE)
            return (agent_dir / HELPER).is_file()
        why = ""
        for command in commands:
            why = _compiled(command)
            if not why:
                break
            log.info("building the launcher with %s failed (%s)", command[0], why)
        if why:
            log.warning("building the agent's native helper failed (%s)", why)
            return False
        built_by = Path(command[0]).name
        try:
            _replace(agent_dir / HELPER, out.read_bytes(), 0o755)
            # After the helper: a crash between the two leaves it stale, built again.
            _replace(agent_dir / HELPER_STAMP, _source_digest(agent_dir).encode(), 0o644)
        except OSError as exc:
            log.warning("cannot write the native helper to %s (%s); set agent_dir", agent_dir, exc)
            return False
    log.info("built the agent's native helper in %s (%s)", agent_dir, built_by)
    return True


def prepare(source: Path, target: str = "") -> str:
    """The directory to mount: `target` (synced from `source`) or `source`, helper built."""
    agent_dir = Path(target).resolve() if target else source
    if agent_dir != source:
        sync_agent(source, agent_dir)
    build_helper(agent_dir)
    with contextlib.suppress(OSError):
        compileall.compile_dir(str(agent_dir), quiet=1, maxlevels=0)
    return str(agent_dir)


def require_static_agent(agent_dir: str) -> None:
    """ConfigurationError unless `agent_dir` holds the static agent and the
    launcher it starts commands with."""
    missing = [name for name in (STATIC_AGENT, HELPER) if not (Path(agent_dir) / name).is_file()]
    if missing:
        msg = (
            f"the in-sandbox agent is missing: {agent_dir} has no {' and no '.join(missing)}: "
            "install the platform wheel `make wheel` builds (it carries both), or build them "
            "in a checkout with `make agent` (Go and a C compiler)"
        )
        raise ConfigurationError(msg)


def main(argv: list[str]) -> int:
    """`python -m runtime.sandbox.agent_dir DIR` (make helper): build DIR's
    launcher now, the way a daemon would at start-up; exit 1 if none results."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if len(argv) != 1:
        print("usage: python -m runtime.sandbox.agent_dir AGENT_DIR", file=sys.stderr)
        return 2
    agent_dir = Path(argv[0])
    with contextlib.suppress(FileNotFoundError):
        (agent_dir / HELPER_STAMP).unlink()  # asked for: build even if it looks current
    return 0 if build_helper(agent_dir) and (agent_dir / HELPER).is_file() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
