"""What the daemon shares with the in-sandbox agent (static-agent/, Go): the
frame protocol both speak, the redaction rules the agent is held to, the
relay's pipe, the python tool's interpreter (run by the image's python3) and
the C launcher the agent starts every command with (spawn.c). The built
binaries (toolrt-agent, toolrt-spawn) live beside them and are mounted
read-only into every sandbox."""
