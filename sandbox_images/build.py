"""Build the default sandbox image offline, only when its recipe changed.

Steps: debootstrap a Debian rootfs (mirror read from this machine's apt
configuration at run time), `docker import` it as the base, then build
`Dockerfile.offline` from that base with networking off. The image is tagged
with a hash of the recipe (`toolrt-sandbox:<hash>`) and `toolrt-sandbox:default`,
so an unchanged recipe costs one `docker image inspect`.

Usage: python sandbox_images/build.py [--force] [--suite bookworm]
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import docker
import docker.errors

RECIPE_DIR = Path(__file__).resolve().parent / "default"
REPOSITORY = "toolrt-sandbox"
DEFAULT_TAG = "default"
BASE_REPOSITORY = "toolrt-base"


def say(msg: str) -> None:
    print(f"sandbox-image: {msg}", file=sys.stderr, flush=True)


def recipe_hash(suite: str) -> str:
    digest = hashlib.sha256(suite.encode())
    for path in sorted(RECIPE_DIR.iterdir()):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def packages() -> list[str]:
    lines = (RECIPE_DIR / "packages.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def debian_mirror(suite: str) -> str:
    """The first apt source serving `suite`, from deb822 files or sources.list."""
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        for stanza in Path(path).read_text().split("\n\n"):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if ":" in line and not line.startswith(("#", " ")):
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
            if suite in fields.get("suites", "").split() and fields.get("uris"):
                if "deb" in fields.get("types", "deb").split():
                    return fields["uris"].split()[0]
    list_files = ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]
    for path in list_files:
        if not os.path.exists(path):
            continue
        for line in Path(path).read_text().splitlines():
            words = [w for w in line.split() if not w.startswith("[")]
            if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                return words[1]
    msg = f"no apt source for suite {suite!r} in /etc/apt; cannot debootstrap offline"
    raise SystemExit(msg)


def image_exists(client: docker.DockerClient, ref: str) -> bool:
    try:
        client.images.get(ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def build_base(client: docker.DockerClient, suite: str, base_ref: str) -> None:
    if shutil.which("debootstrap") is None:
        msg = "debootstrap is missing: run scripts/ensure-docker.sh as root"
        raise SystemExit(msg)
    mirror = debian_mirror(suite)
    with tempfile.TemporaryDirectory(prefix="toolrt-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        say(f"debootstrap {suite} from {mirror} (about a minute)")
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(packages())}",
                suite,
                str(rootfs),
                mirror,
            ],
            check=True,
            stdout=sys.stderr,
        )
        # apt lists and caches are dead weight in a sandbox without network.
        for junk in ("var/lib/apt/lists", "var/cache/apt"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        tarball = Path(tmp) / "rootfs.tar"
        say("packing rootfs")
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
        say(f"docker import as {base_ref}")
        repository, _, tag = base_ref.partition(":")
        client.api.import_image_from_file(str(tarball), repository=repository, tag=tag)


def build_image(client: docker.DockerClient, base_ref: str, image_ref: str) -> None:
    say(f"building {image_ref} from {base_ref}")
    stream = client.api.build(
        path=str(RECIPE_DIR),
        dockerfile="Dockerfile.offline",
        tag=image_ref,
        buildargs={"BASE": base_ref},
        network_mode="none",
        rm=True,
        forcerm=True,
        decode=True,
    )
    for event in stream:
        if "error" in event:
            msg = f"image build failed: {event['error']}"
            raise SystemExit(msg)
        text = event.get("stream", "").rstrip()
        if text:
            say(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--suite", default="bookworm", help="Debian suite of the rootfs")
    args = parser.parse_args()

    client = docker.from_env(timeout=600)
    digest = recipe_hash(args.suite)
    image_ref = f"{REPOSITORY}:{digest}"
    base_ref = f"{BASE_REPOSITORY}:{digest}"
    if image_exists(client, image_ref) and not args.force:
        client.images.get(image_ref).tag(REPOSITORY, DEFAULT_TAG)
        say(f"{image_ref} is up to date")
        return 0
    if args.force or not image_exists(client, base_ref):
        build_base(client, args.suite, base_ref)
    build_image(client, base_ref, image_ref)
    client.images.get(image_ref).tag(REPOSITORY, DEFAULT_TAG)
    say(f"ready: {image_ref} (also {REPOSITORY}:{DEFAULT_TAG})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
