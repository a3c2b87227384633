"""`toolrt image build`: the sandbox image from the recipe the installed package carries."""

from __future__ import annotations

import argparse
from typing import Any

from runtime.cli.options import add_verb_group
from runtime.images import DEFAULT_IMAGE, RECIPES


def _image(args: argparse.Namespace) -> int:
    # Imported here: the Docker SDK is heavy and other commands never need it.
    from runtime.images.build import build

    build(tag=args.tag, force=args.force, suite=args.suite, recipe=args.recipe)
    return 0


def add_commands(sub: Any) -> None:
    helps = {"build": "build the default sandbox image (only when its recipe changed)"}
    for _, parser in add_verb_group(sub, "image", "the sandbox image", helps):
        parser.add_argument(
            "--tag", default=DEFAULT_IMAGE, help=f"the name to give it (default {DEFAULT_IMAGE})"
        )
        parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
        parser.add_argument("--suite", default="bookworm", help="Debian suite of the rootfs")
        parser.add_argument(
            "--recipe",
            choices=RECIPES,
            default="auto",
            help="offline (debootstrap, as root), online (pulls debian:bookworm-slim), or auto "
            "(offline when it can)",
        )
        parser.set_defaults(func=_image)
