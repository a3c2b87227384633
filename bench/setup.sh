#!/usr/bin/env bash
# The benchmark's own environment: toolrt (editable) plus the peer it is
# measured against (llm-sandbox), matplotlib, and the Jupyter kernel the
# python tool's engine is weighed against (bench.engines), from the package index.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=bench/.venv
STAMP=$VENV/.installed
if [[ ! -f $STAMP || pyproject.toml -nt $STAMP || bench/setup.sh -nt $STAMP ]]; then
    ${PYTHON:-python3} -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q -e . 'llm-sandbox[docker]' matplotlib ipykernel jupyter_client
    touch "$STAMP"
fi
