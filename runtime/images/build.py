"""`toolrt image build`: the default sandbox image from the recipe the package carries.

Built only when the recipe changed: the image is tagged with a hash of the
recipe (`toolrt-sandbox:<hash>`) and then with `--tag` (default
`toolrt-sandbox:default`), so an unchanged recipe costs one `docker image
inspect`. Two ways to the same image:
- offline (root, `debootstrap` installed): debootstrap a Debian rootfs (the
  mirror read from this machine's apt configuration), apt-get the recipe's
  packages into it, `docker import` it as
  the base, then build `Dockerfile.offline` from it with networking off;
- online (anywhere the engine can pull): build `Dockerfile` from
  `debian:bookworm-slim`.
`--recipe auto` (the default) takes the offline way when it can.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import docker
import docker.errors

from runtime.images import DEFAULT_IMAGE, RECIPE_DIR, REPOSITORY

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
            ["debootstrap", "--variant=minbase", suite, str(rootfs), mirror],
            check=True,
            stdout=sys.stderr,
        )
        apt_install(rootfs, packages())
        # apt lists and caches are dead weight in a sandbox without network.
        for junk in ("var/lib/apt/lists", "var/cache/apt"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        tarball = Path(tmp) / "rootfs.tar"
        say("packing rootfs")
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
        say(f"docker import as {base_ref}")
        repository, _, tag = base_ref.partition(":")
        client.api.import_image_from_file(str(tarball), repository=repository, tag=tag)


def apt_install(rootfs: Path, names: list[str]) -> None:
    """The recipe's packages installed by apt inside the new root, as the
    online recipe does. Not by debootstrap's `--include`: its resolver always
    takes the first alternative of an or-dependency (python3-fonttools'
    `python3-scipy | python3-munkres` would bring scipy, pythran, gcc and
    Boost: a gigabyte), where apt takes one the list already names."""
    say(f"apt-get install {len(names)} packages in the new root")
    shutil.copyfile("/etc/resolv.conf", rootfs / "etc/resolv.conf")
    proc = rootfs / "proc"
    subprocess.run(["mount", "-t", "proc", "proc", str(proc)], check=True)
    try:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive"}
        for args in (["update"], ["install", "-y", "--no-install-recommends", *names]):
            subprocess.run(
                ["chroot", str(rootfs), "apt-get", "-q", *args],
                check=True,
                env=env,
                stdout=sys.stderr,
            )
    finally:
        subprocess.run(["umount", str(proc)], check=True)
        (rootfs / "etc/resolv.conf").write_text("")


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
    follow(stream)


def build_online(client: docker.DockerClient, image_ref: str) -> None:
    say(f"building {image_ref} from debian:bookworm-slim (pulls it)")
    stream = client.api.build(
        path=str(RECIPE_DIR), dockerfile="Dockerfile", tag=image_ref, rm=True, decode=True
    )
    follow(stream)


def follow(stream: Any) -> None:
    for event in stream:
        if "error" in event:
            msg = f"image build failed: {event['error']}"
            raise SystemExit(msg)
        text = event.get("stream", "").rstrip()
        if text:
            say(text)


def split_tag(ref: str) -> tuple[str, str]:
    """`repo:tag` → (repo, tag); `host:5000/repo` → (host:5000/repo, latest)."""
    repository, colon, name = ref.rpartition(":")
    if not colon or "/" in name:
        return ref, "latest"
    return repository, name


def can_debootstrap() -> bool:
    return os.geteuid() == 0 and shutil.which("debootstrap") is not None


def build(
    tag: str = DEFAULT_IMAGE, force: bool = False, suite: str = "bookworm", recipe: str = "auto"
) -> str:
    """Build (or find up to date) the default image, tag it `tag`; its hash-tagged name."""
    client = docker.from_env(timeout=600)
    try:
        digest = recipe_hash(suite)
        image_ref = f"{REPOSITORY}:{digest}"
        base_ref = f"{BASE_REPOSITORY}:{digest}"
        repository, name = split_tag(tag)
        if image_exists(client, image_ref) and not force:
            client.images.get(image_ref).tag(repository, name)
            say(f"{image_ref} is up to date (tagged {tag})")
            return image_ref
        if recipe == "online" or (recipe == "auto" and not can_debootstrap()):
            build_online(client, image_ref)
        else:
            if force or not image_exists(client, base_ref):
                build_base(client, suite, base_ref)
            build_image(client, base_ref, image_ref)
        client.images.get(image_ref).tag(repository, name)
        say(f"ready: {image_ref} (also {tag})")
        return image_ref
    finally:
        client.close()
