"""The recorded task every example replays offline (no network, no API key).

Each turn is the tool calls a model made, in toolrt's neutral form; every
example turns them into its provider's own SDK objects. Turn two carries two
typical model mistakes: a wrongly typed argument and a tool that does not exist.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

TASK = "Create calc.py with add(a, b), check that it works, and tell me what add(2, 3) is."
TURNS: list[list[tuple[str, str, dict[str, Any]]]] = [
    [
        ("1", "shell", {"command": "printf 'def add(a, b):\\n    return a + b\\n' > calc.py; ls"}),
        ("2", "shell", {"command": "python3 --version"}),
    ],
    [
        ("3", "shell", {"command": "python3 -c 'import calc; print(calc.add(2, 3))'"}),
        ("4", "shell", {"command": 5}),
        ("5", "browser", {"url": "https://example.com"}),
    ],
]
FINAL = "calc.add(2, 3) returns 5."
SYSTEM = "You are a careful engineer. Use the tools; the sandbox has no network."


def arguments(key_variable: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="127.0.0.1:50051", help="toolrt daemon")
    parser.add_argument("--replay", action="store_true", help="replay the recorded transcript")
    parser.add_argument("task", nargs="?", default=TASK)
    args = parser.parse_args()
    args.replay = args.replay or not os.environ.get(key_variable)
    return args
