"""The agent's entry point: `python3 -I /opt/toolrt/agent/main.py`.

The agent is a package (its modules import each other relatively, as they
do inside the daemon's `runtime.agent`); this script only puts the
package's parent on sys.path and runs the loop. A script is compiled on
every start, a module is loaded from the bytecode the daemon compiled
beside it (the sandbox cannot write a cache to this read-only mount): so
the script is these few lines.
"""

import os
import sys

# -I drops the script's directory from sys.path; its parent is a read-only
# root-owned bind mount, so putting it there is safe.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Imported by its mount point's name, which only exists in the sandbox.
from agent import loop, seccomp  # type: ignore[import-not-found]  # noqa: E402

# Before any thread: the agent too runs under the commands' syscall filter.
seccomp.confine_agent()
loop.main()
