"""The shape of untrusted JSON text, read without parsing it.

Tool arguments, provider messages and journal entries are all checked here
for nesting depth and item count before any JSON parser goes deep: a guard
every layer uses, so it sits at the ground floor.
"""

from __future__ import annotations

import regex

# Array elements and object members: what parsing and validating cost (a
# megabyte of one string is cheap, a megabyte of `[1,1,1,...]` is not).
MAX_ITEMS = 100_000
# A JSON token that matters for its shape: a whole string (to its closing
# quote, or the end of a text that never closes it), a bracket or a comma.
_TOKEN = regex.compile(
    r'"[^"\\]*(?:\\.?[^"\\]*)*(?:"|\Z)|(?P<open>[\[{])|(?P<close>[\]}])|(?P<comma>,)',
    regex.S,
)


def json_shape(text: str, max_items: int) -> tuple[int, int]:
    """(deepest [ / { nesting, items) of JSON text, outside strings, without
    parsing it. Items are containers and commas (about one per array element
    and object member); the count stops past `max_items`. A string, however
    long, is one step of the scan: its cost is the number of tokens, not of
    characters (tokens past four per item stop it too: text that is not
    JSON, strings without commas between them)."""
    depth = deepest = items = 0
    for tokens, match in enumerate(_TOKEN.finditer(text, concurrent=True)):
        if tokens > 4 * max_items:
            return deepest, max_items + 1
        kind = match.lastgroup
        if kind == "open":
            depth += 1
            deepest = max(deepest, depth)
            items += 1
        elif kind == "close":
            depth -= 1
        elif kind == "comma":
            items += 1
        if items > max_items:
            break
    return deepest, items
