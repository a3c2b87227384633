#!/usr/bin/env bash
# Make sure a Docker engine answers on this host.
#
# Dev hosts and CI of this project start without an engine and without any
# image registry: install Debian's docker.io (plus runsc for gVisor and
# debootstrap for the offline image build) when missing, register runsc, and
# start dockerd with no bridge network when it does not answer.
set -euo pipefail

log() { printf 'ensure-docker: %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
  if docker info >/dev/null 2>&1; then exit 0; fi
  log "no Docker engine answers and installing one needs root; rerun as root"
  exit 1
fi

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v runsc >/dev/null 2>&1 || missing+=(runsc)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]} with apt"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# gVisor: the runtime gets networking off at its own level too.
daemon_json=/etc/docker/daemon.json
runsc_path=$(command -v runsc || true)
if [ -n "$runsc_path" ] && ! grep -q '"runsc"' "$daemon_json" 2>/dev/null; then
  mkdir -p /etc/docker
  if [ -s "$daemon_json" ]; then
    python3 - "$daemon_json" "$runsc_path" <<'PY'
import json, sys
path, runsc = sys.argv[1], sys.argv[2]
with open(path) as f:
    cfg = json.load(f)
cfg.setdefault("runtimes", {})["runsc"] = {"path": runsc, "runtimeArgs": ["--network=none"]}
with open(path, "w") as f:
    json.dump(cfg, f, indent=2)
PY
  else
    printf '{\n  "runtimes": {"runsc": {"path": "%s", "runtimeArgs": ["--network=none"]}}\n}\n' \
      "$runsc_path" >"$daemon_json"
  fi
  log "registered runsc in $daemon_json"
fi

# Prefer Debian's client (matches the engine); any client talks to the socket.
docker_cli=/usr/bin/docker
[ -x "$docker_cli" ] || docker_cli=$(command -v docker)

if "$docker_cli" info >/dev/null 2>&1; then
  exit 0
fi

if ! pgrep -x containerd >/dev/null 2>&1 && command -v containerd >/dev/null 2>&1; then
  log "starting containerd"
  nohup containerd >/var/log/toolrt-containerd.log 2>&1 &
fi
if ! [ -S /var/run/docker.sock ] || ! pgrep -x dockerd >/dev/null 2>&1; then
  log "starting dockerd (no bridge, no iptables)"
  rm -f /var/run/docker.pid
  nohup dockerd --bridge=none --iptables=false --ip6tables=false \
    --containerd=/run/containerd/containerd.sock \
    >/var/log/toolrt-dockerd.log 2>&1 &
fi
for _ in $(seq 1 120); do
  if "$docker_cli" info >/dev/null 2>&1; then
    log "engine answers: $("$docker_cli" version --format '{{.Server.Version}}')"
    exit 0
  fi
  sleep 0.5
done
log "dockerd did not answer within 60 s; see /var/log/toolrt-dockerd.log"
tail -n 20 /var/log/toolrt-dockerd.log >&2 || true
exit 1
