"""An idle agent loads only what every session needs: the egress relay's
asyncio server (about 8 MiB per sandbox) is imported only with network."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"


def agent_prints(code: str) -> list[str]:
    """What `code` prints after importing the agent's loop as the sandbox
    imports it (package `agent` on the path), word by word."""
    script = f"import sys; sys.path.insert(0, sys.argv[1]); from agent import loop; {code}"
    done = subprocess.run(
        [sys.executable, "-I", "-c", script, str(RUNTIME)],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def test_the_agent_loop_does_not_import_asyncio_until_a_relay_starts():
    printed = agent_prints(
        "print('asyncio' in sys.modules, 'ssl' in sys.modules); "
        "from agent import relay_server; print('asyncio' in sys.modules)"
    )
    assert printed == ["False", "False", "True"]


def test_the_agent_does_not_import_dataclasses_or_inspect():
    # About 1.3 MiB of every idle sandbox (runtime/agent/records.py says why).
    printed = agent_prints("print(*{'dataclasses', 'inspect', 'platform'} & set(sys.modules))")
    assert printed == []
