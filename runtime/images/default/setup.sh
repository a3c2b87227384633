#!/bin/sh
# Shared last step of both recipes: the unprivileged user that every command
# runs as, and the mount points the daemon puts tmpfs on.
set -eu
groupadd --gid 1000 sandbox
useradd --uid 1000 --gid 1000 --home-dir /workspace --no-create-home --shell /bin/bash sandbox
mkdir -p /workspace /opt/toolrt
chown 1000:1000 /workspace
# Plain `pip install NAME` as the sandbox user: without Debian's PEP 668
# marker pip falls back to the user's site (HOME=/workspace, so
# /workspace/.local), the system's packages stay untouched (the root
# filesystem is read-only anyway). No version check (it would ask an index
# the session may not reach) and no cache in the size-capped workspace.
rm -f /usr/lib/python3*/EXTERNALLY-MANAGED
cat > /etc/pip.conf <<'PIP'
[global]
disable-pip-version-check = true
no-cache-dir = true
PIP
# Every command runs under LANG=C.UTF-8: with the locale in an archive, a
# process maps one file at its start instead of opening and mapping a dozen
# (about a quarter of a millisecond of CPU for each bash a call starts).
# Built by the image's own localedef from its own compiled locale.
localedef --add-to-archive /usr/lib/locale/C.utf8
localedef --list-archive | grep -qx C.utf8
# curl, git, pip and Python's ssl read the system bundle: it must be built.
test -s /etc/ssl/certs/ca-certificates.crt
# Keep the image small: docs and caches are of no use in a sandbox.
rm -rf /usr/share/doc/* /usr/share/man/* /var/cache/apt/archives/*.deb
