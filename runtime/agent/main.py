"""The agent's entry point: `python3 -I /opt/toolrt/main.py`.

A script is compiled on every start, a module is loaded from the bytecode
the daemon compiled beside it (the sandbox cannot write a cache to this
read-only mount): so the script is these few lines and the agent a module.
"""

import os
import sys

# -I drops the script's directory from sys.path; this directory is a
# read-only root-owned bind mount, so putting it back is safe.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import agent  # noqa: E402

agent.main()
