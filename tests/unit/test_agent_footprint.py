"""An idle agent loads only what every session needs: the egress relay's
asyncio server (about 8 MiB per sandbox) is imported only with network."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"


def test_the_agent_loop_does_not_import_asyncio_until_a_relay_starts():
    # The agent is imported as the sandbox imports it: package `agent` on the path.
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); from agent import loop; "
        "print('asyncio' in sys.modules, 'ssl' in sys.modules); "
        "from agent import relay_server; print('asyncio' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", script, str(RUNTIME)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["False", "False", "True"], done.stderr


def test_the_agent_does_not_import_dataclasses_or_inspect():
    # About 1.3 MiB of every idle sandbox (runtime/agent/records.py says why).
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); from agent import loop; "
        "print(sorted({'dataclasses', 'inspect', 'platform'} & set(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", script, str(RUNTIME)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "[]", done.stderr
