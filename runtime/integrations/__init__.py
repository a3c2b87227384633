"""toolrt inside the harnesses people already run: one module per harness.

Each provider is an optional extra (`pip install 'toolrt[deepagents]'`) and
is built on the same pieces: `connection` (the daemon from `TOOLRT_*`
variables, the sessions a harness creates and their label) and `commands`
(a command or a file through the public RPCs, every failure sorted into a
few kinds each harness turns into its own types).
"""
