"""Each harness's "create sandbox -> first command's result" on toolrt beside
its own Docker sandbox (`make bench`, or alone with `--only harnesses`).

The harnesses live in `.venv-integrations` (`make test-integrations` builds
it), not in the bench's environment: bench/harness_runner.py runs there
against a featured daemon (cold sessions, as the Docker sandboxes are) and
reports every round's times. The Agents SDK's `DockerSandboxClient` runs with
`network_mode="none"`, mini-swe-agent's `docker` environment with
`--network none`, both on the sandbox image; both remove their containers
in the background, so the bench's clean-up (by the daemon's label, which
they carry) may find one still there. inspect's Docker sandbox needs
Docker Compose >= 2.21, which this machine lacks: no row. Without the
virtualenv the rows say why.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from bench.ours import Daemon, featured
from bench.stats import Sample

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv-integrations" / "bin" / "python"
RUNNER_TIMEOUT_S = 900
ROWS = {
    "agents_toolrt": "Agents SDK: ToolrtSandboxClient create + first exec",
    "agents_docker": "Agents SDK: DockerSandboxClient (network none) create + first exec",
    "mini_toolrt": "mini-swe-agent: toolrt environment + first execute",
    "mini_docker": "mini-swe-agent: docker environment (--network none) + first execute",
    "inspect_docker": "inspect: its Docker sandbox",
}
INSPECT_NOTE = "inspect's Docker sandbox needs Docker Compose >= 2.21, absent here: not measured"


def unavailable() -> str:
    """Why the harnesses cannot be measured here ("" when they can)."""
    if not PYTHON.is_file():
        return "no .venv-integrations: run make test-integrations first"
    return ""


def measure(d: Daemon, quick: bool) -> dict[str, Sample]:
    """The four rows (harness x sandbox), rounds alternating among them."""
    s = {key: Sample(name) for key, name in ROWS.items()}
    s["inspect_docker"].note = INSPECT_NOTE
    why = unavailable()
    if why:
        for key in ("agents_toolrt", "agents_docker", "mini_toolrt", "mini_docker"):
            s[key].note = why
        return s
    env = {**os.environ, "TOOLRT_TARGET": d.target, "TOOLRT_TOKEN": d.token}
    done = subprocess.run(
        [str(PYTHON), "-m", "bench.harness_runner", str(3 if quick else 10),
         f"toolrt.daemon={d.instance}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUNNER_TIMEOUT_S, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        msg = f"harness_runner failed ({done.returncode}): {done.stderr.strip()[-800:]}"
        raise RuntimeError(msg)
    for key, times in json.loads(done.stdout.strip().splitlines()[-1]).items():
        s[key].times = times
    return s


def alone(instance: str, log_path: str, quick: bool, daemons: list[Daemon]) -> dict[str, Sample]:
    """`measure` on a featured daemon of its own (`--only harnesses`)."""
    with tempfile.TemporaryDirectory(prefix="toolrt-bench-") as tmp:
        d = featured(f"{instance}-hx", log_path, Path(tmp))
        daemons.append(d)
        return measure(d, quick)
