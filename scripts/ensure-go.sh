#!/usr/bin/env bash
# Make sure Debian's Go toolchain is installed: the static agent (agent/) is
# built with it, stdlib only and CGO_ENABLED=0, so apt's golang-go (1.19 on
# bookworm) is all it needs; no toolchain or module is downloaded elsewhere.
set -euo pipefail

if command -v go >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "ensure-go: no go on PATH and installing golang-go needs root; rerun as root" >&2
  exit 1
fi
echo "ensure-go: installing golang-go with apt" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends golang-go >/dev/null
