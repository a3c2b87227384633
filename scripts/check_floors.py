"""Install toolrt with every runtime dependency at its declared floor, then import it.

A floor that pip accepts can still fail at import: the committed stubs refuse a
grpcio or protobuf older than the grpcio-tools that generated them. So this
builds a scratch venv in a temporary directory, installs the project from a
copy of the tracked tree with each `name>=floor` of `[project].dependencies`
pinned to `name==floor`, imports every daemon module from the installed copy,
smoke-tests the Docker SDK against requests, and removes the venv.

Usage: python3 scripts/check_floors.py  (or `make floors`); exit 1 on any failure.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# `name>=floor`, optionally with extras; markers and upper bounds may follow.
FLOOR = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)")

# Named in the packaging issue; the walk below covers every other toolrt module.
REQUIRED_MODULES = [
    "runtime._proto.toolruntime.v1.runtime_pb2_grpc",
    "runtime.server.app",
    "runtime.client",
    "runtime.cli",
    # Imported only when configured (otel_endpoint) or run (`toolrt top`): checked here.
    "opentelemetry.sdk.trace",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "rich.live",
]

# Run inside the scratch venv, from outside the source tree (`python -I`), so
# only the installed copy can answer. The agent is skipped: it runs inside the
# sandbox on the image's own Python and imports the stdlib only. So are the
# harness providers: each needs its optional extra (make test-integrations
# installs those at the versions it tests).
IMPORT_CHECK = """
import importlib, pkgutil, sys, traceback
import runtime
required = sys.argv[1:]
found = [m.name for m in pkgutil.walk_packages(runtime.__path__, "runtime.")
         if not m.name.startswith(("runtime.agent", "runtime.integrations."))
         and not m.name.endswith(".__main__")]
names = list(dict.fromkeys([*required, *found]))
failed = []
for name in names:
    try:
        importlib.import_module(name)
    except Exception:
        failed.append(name)
        print(f"FAIL import {name}", file=sys.stderr)
        traceback.print_exc()
print(f"imported {len(names) - len(failed)} modules, {len(failed)} failed")
sys.exit(1 if failed else 0)
"""

# docker 7.0 imports fine but cannot reach a unix socket with requests >= 2.32
# ("Not supported URL scheme http+docker"): the engine being absent must show
# as a connection error, the way the daemon uses the SDK.
DOCKER_SMOKE = """
import docker, requests
client = docker.DockerClient(base_url="unix:///nonexistent/docker.sock", version="1.41")
try:
    client.ping()
except requests.exceptions.ConnectionError:
    print("docker SDK reaches unix sockets")
else:
    raise SystemExit("docker ping to a missing socket succeeded?")
"""


def floors(pyproject: Path) -> list[str]:
    """`name==floor` for every runtime dependency; each must declare a `>=` floor."""
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    pins = []
    for dep in deps:
        match = FLOOR.match(dep)
        if match is None:
            msg = f"{pyproject}: dependency {dep!r} does not start with a `>=` floor; declare one"
            raise SystemExit(msg)
        name, extras, floor = match.groups()
        marker = dep.partition(";")[2].strip()
        pins.append(f"{name}{extras or ''}=={floor}" + (f"; {marker}" if marker else ""))
    return pins


def copy_tracked_tree(dest: Path) -> None:
    """Copy what a fresh clone would hold (plus new, not-ignored files) to dest.

    Building from the work tree itself would reuse a stale `build/` left by an
    earlier install, which can ship modules that no longer exist.
    """
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = ROOT / rel
        if src.is_file():  # deleted but not yet staged files are still listed
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def run(step: str, cmd: list[str], cwd: Path) -> None:
    print(f"floors: {step}", flush=True)
    if subprocess.run(cmd, cwd=cwd).returncode != 0:
        msg = f"floors: FAILED: {step}"
        raise SystemExit(msg)


def main() -> int:
    pins = floors(ROOT / "pyproject.toml")
    with tempfile.TemporaryDirectory(prefix="toolrt-floors-") as tmp_dir:
        tmp = Path(tmp_dir)
        src = tmp / "src"
        copy_tracked_tree(src)
        venv.create(tmp / "venv", with_pip=True)
        py = str(tmp / "venv" / "bin" / "python")
        run(
            f"install at the floors: {' '.join(pins)}",
            [py, "-m", "pip", "install", "-q", str(src), *pins],
            tmp,
        )
        run("import every daemon module", [py, "-I", "-c", IMPORT_CHECK, *REQUIRED_MODULES], tmp)
        run("docker SDK smoke test", [py, "-I", "-c", DOCKER_SMOKE], tmp)
    print("floors: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
