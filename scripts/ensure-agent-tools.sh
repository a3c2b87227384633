#!/usr/bin/env bash
# Make sure what the static agent needs is installed, from Debian's archive:
# golang-go (1.19 on bookworm) builds it, stdlib only and CGO_ENABLED=0, so no
# toolchain or module is downloaded from anywhere else; busybox-static is the
# whole of the BusyBox-only image its Docker tests build offline.
set -euo pipefail

missing=()
command -v go >/dev/null 2>&1 || missing+=(golang-go)
[ -x /bin/busybox ] || missing+=(busybox-static)
if [ "${#missing[@]}" -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "ensure-agent-tools: ${missing[*]} missing and installing needs root; rerun as root" >&2
  exit 1
fi
echo "ensure-agent-tools: installing ${missing[*]} with apt" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
