#!/usr/bin/env bash
# `make test-integrations`: the providers of runtime/integrations driven by the
# harnesses' own code, against a real daemon started here.
#
# 1. A virtualenv of its own (.venv-integrations: the harnesses are ~1 GB and
#    stay out of .[dev]) from the extras, at the versions of the tested matrix
#    (tests/integrations/constraints.txt); rebuilt when either file changes.
# 2. A daemon on 127.0.0.1 (Docker backend, default image, no warm pool) with
#    its own instance name and a temporary state_dir. Its default tenant is
#    granted root, root's capabilities and a writable root under runsc-overlay,
#    for inspect's self_check on such a session: permissions only take effect
#    for a session that asks, so the other tests' default sessions stay as
#    they are (still no other user, a read-only root).
# 3. pytest on tests/integrations against it (TOOLRT_TARGET).
# 4. The daemon stopped by its pid; then no container of its instance may be
#    left (the count before and after is printed). Any left are removed and
#    the run fails.
# No network beyond the package registries (step 1), no model API.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv-integrations
STAMP=$VENV/.installed
CONSTRAINTS=tests/integrations/constraints.txt
EXTRAS="mini-swe-agent,deepagents,inspect,openai-agents"

if [[ ! -f $STAMP || pyproject.toml -nt $STAMP || $CONSTRAINTS -nt $STAMP ]]; then
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q -c "$CONSTRAINTS" -e ".[$EXTRAS]" -r tests/integrations/requirements.txt
    touch "$STAMP"
fi

instance="toolrt-integrations-$$"
count_containers() { docker ps -aq --filter "label=toolrt.daemon=$instance" | wc -l; }
workdir=$(mktemp -d)
port=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$workdir/toolrt.toml" <<EOF
listen = "127.0.0.1:$port"
instance = "$instance"
state_dir = "$workdir/state"
pool_size = 0
runtimes = ["runsc-overlay"]

[tenants.default]
users = ["root", "inspect-ai-test-exec-as-user"]
root_capabilities = true
writable_root = true
EOF

before=$(count_containers)
"$VENV/bin/toolrt" serve --config "$workdir/toolrt.toml" >"$workdir/daemon.log" 2>&1 &
daemon=$!
stop_daemon() {
    if kill -0 "$daemon" 2>/dev/null; then
        kill -TERM "$daemon"
        wait "$daemon" || true
    fi
}
trap 'stop_daemon; rm -rf "$workdir"' EXIT

export TOOLRT_TARGET="127.0.0.1:$port"
"$VENV/bin/python" - <<'EOF'
import time

from runtime.client import Client, ToolrtRpcError

deadline = time.monotonic() + 120
while True:
    try:
        with Client() as client:
            client.list_sessions()
        break
    except ToolrtRpcError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.2)
EOF

status=0
"$VENV/bin/python" -m pytest -c tests/integrations/pytest.ini tests/integrations "$@" || status=$?

stop_daemon
after=$(count_containers)
echo "containers of daemon $instance: $before before, $after after"
if [[ $after -ne $before ]]; then
    echo "left behind:" >&2
    docker ps -a --filter "label=toolrt.daemon=$instance" >&2
    docker ps -aq --filter "label=toolrt.daemon=$instance" | xargs -r docker rm -f >/dev/null
    status=1
fi
if [[ $status -ne 0 ]]; then
    tail -n 50 "$workdir/daemon.log" >&2
fi
exit $status
