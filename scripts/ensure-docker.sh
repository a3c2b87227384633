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

# gVisor: registered with the flags the sandboxes need (DESIGN, platform
# notes): no network of its own, bind-mounted unix sockets (the egress relay)
# openable, and the container's seccomp profile applied (without it runsc
# ignores the profile). A second runtime, runsc-overlay, is the same with the
# root filesystem's overlay in the sandbox's memory (--overlay2=root:memory):
# what a session's writable root needs to stay bounded (docs/programs.md).
# An existing registration is brought up to date; a running dockerd reloads
# its runtimes on SIGHUP, so it is never restarted.
daemon_json=/etc/docker/daemon.json
runsc_path=$(command -v runsc || true)
runsc_changed=no
if [ -n "$runsc_path" ]; then
  mkdir -p /etc/docker
  runsc_changed=$(python3 - "$daemon_json" "$runsc_path" <<'PY'
import json, os, sys
path, runsc = sys.argv[1], sys.argv[2]
flags = ["--network=none", "--host-uds=open", "--oci-seccomp"]
wanted = {
    "runsc": {"path": runsc, "runtimeArgs": flags},
    "runsc-overlay": {"path": runsc, "runtimeArgs": [*flags, "--overlay2=root:memory"]},
}
cfg = {}
if os.path.exists(path) and os.path.getsize(path) > 0:
    with open(path) as f:
        cfg = json.load(f)
runtimes = cfg.setdefault("runtimes", {})
if all(runtimes.get(name) == args for name, args in wanted.items()):
    print("no")
else:
    runtimes.update(wanted)
    with open(path + ".toolrt-new", "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    os.replace(path + ".toolrt-new", path)
    print("yes")
PY
)
  [ "$runsc_changed" = yes ] && log "registered runsc and runsc-overlay in $daemon_json: ${runsc_path} --network=none --host-uds=open --oci-seccomp (runsc-overlay: --overlay2=root:memory)"
fi

# Prefer Debian's client (matches the engine); any client talks to the socket.
docker_cli=/usr/bin/docker
[ -x "$docker_cli" ] || docker_cli=$(command -v docker)

if "$docker_cli" info >/dev/null 2>&1; then
  if [ "$runsc_changed" = yes ]; then
    # Reload, not restart: running containers (other users') are untouched.
    log "reloading dockerd's configuration (SIGHUP)"
    kill -HUP "$(cat /var/run/docker.pid)"
    for _ in $(seq 1 20); do
      if "$docker_cli" info --format '{{json .Runtimes}}' 2>/dev/null | grep -q -- '--overlay2=root:memory'; then
        exit 0
      fi
      sleep 0.5
    done
    log "dockerd did not take the new runsc runtimes after SIGHUP; restart it to apply them"
    exit 1
  fi
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
