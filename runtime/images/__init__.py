"""The sandbox image recipes the package carries (`default/`), and their build
(`build.py`: `toolrt image build`, which `make image` runs from a checkout)."""

from __future__ import annotations

from pathlib import Path

RECIPE_DIR = Path(__file__).resolve().parent / "default"
REPOSITORY = "toolrt-sandbox"
DEFAULT_IMAGE = f"{REPOSITORY}:default"
# How `toolrt image build` gets there (see build.py).
RECIPES = ("auto", "offline", "online")
