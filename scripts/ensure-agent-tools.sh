#!/usr/bin/env bash
# Make sure what the static agent needs is installed, from Debian's archive:
# golang-go (1.19 on bookworm) builds it, stdlib only and CGO_ENABLED=0 but for
# Debian's xz package, so no toolchain or module is downloaded from anywhere
# else; busybox-static is the
# whole of the BusyBox-only image its Docker tests build offline; musl-tools
# builds the launcher.
set -euo pipefail

missing=()
command -v go >/dev/null 2>&1 || missing+=(golang-go)
[ -x /bin/busybox ] || missing+=(busybox-static)
# xz archives (static-agent/go.mod points there: no module is downloaded).
[ -f /usr/share/gocode/src/github.com/ulikunitz/xz/go.mod ] || missing+=(golang-github-ulikunitz-xz-dev)
# musl-gcc builds the launcher (runtime/agent/spawn.c) smaller and quicker to
# start than glibc's static; optional (gcc -static otherwise), so only root adds it.
if ! command -v musl-gcc >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
  missing+=(musl-tools)
fi
if [ "${#missing[@]}" -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "ensure-agent-tools: ${missing[*]} missing and installing needs root; rerun as root" >&2
  exit 1
fi
echo "ensure-agent-tools: installing ${missing[*]} with apt" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
