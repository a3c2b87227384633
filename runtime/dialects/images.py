"""Images in results (the python tool's PNG outputs), for the dialects.

A result's `output.outputs[]` may hold base64 PNGs. Dialects whose tool
results take images send them as image parts, and the JSON text they also
send carries a short note in place of each image's base64 (the model reads
the picture, not its bytes). Caps per image and per call keep a result
within what providers accept (Anthropic takes 5 MB of base64 per image);
an image past them stays a note. OpenAI Chat tool messages take text only:
there each image is a note, and a line says its size.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from runtime.dialects.common import payload
from runtime.models import ToolResult

PNG = "image/png"
# Decoded bytes: 3.75 MB is 5 MB of base64.
MAX_IMAGE_BYTES = 3_750_000
MAX_IMAGES = 8


@dataclass(frozen=True)
class Parts:
    """A result as the model is shown it: its JSON payload, its images."""

    payload: dict[str, Any]
    # Base64 PNGs to attach, in order.
    images: list[str]
    # One line per image for a text-only dialect.
    lines: list[str]


def _outputs(body: dict[str, Any]) -> list[Any]:
    holder = body.get("output") if "error" in body else body
    outputs = holder.get("outputs") if isinstance(holder, dict) else None
    return outputs if isinstance(outputs, list) else []


def split(result: ToolResult, attach: bool) -> Parts:
    """The payload with a note for each PNG, and the PNGs to attach (`attach`
    False: none, as for a text-only dialect)."""
    body = payload(result)
    if not any(_is_png(item) for item in _outputs(body)):
        return Parts(body, [], [])
    body = copy.deepcopy(body)
    images: list[str] = []
    lines: list[str] = []
    for number, item in enumerate((i for i in _outputs(body) if _is_png(i)), start=1):
        data = item["data"]
        size = len(data) * 3 // 4 - data[-2:].count("=")
        if not attach:
            item["data"] = f"[PNG image, {size} bytes: in output_json]"
            lines.append(
                f"image {number}: a {size}-byte PNG, in output_json (this message takes text only)"
            )
        elif size <= MAX_IMAGE_BYTES and len(images) < MAX_IMAGES:
            images.append(data)
            item["data"] = f"[PNG image, {size} bytes: attached as image {len(images)}]"
        else:
            item["data"] = (
                f"[PNG image, {size} bytes: not attached, past the cap of {MAX_IMAGES} images "
                f"of {MAX_IMAGE_BYTES} bytes per result; in output_json]"
            )
    return Parts(body, images, lines)


def _is_png(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == PNG and isinstance(item.get("data"), str)
