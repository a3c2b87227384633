#!/bin/sh
# Shared last step of both recipes: the unprivileged user that every command
# runs as, and the mount points the daemon puts tmpfs on.
set -eu
groupadd --gid 1000 sandbox
useradd --uid 1000 --gid 1000 --home-dir /workspace --no-create-home --shell /bin/bash sandbox
mkdir -p /workspace /opt/toolrt
chown 1000:1000 /workspace
# Keep the image small: docs and caches are of no use in a sandbox.
rm -rf /usr/share/doc/* /usr/share/man/* /var/cache/apt/archives/*.deb
