"""Tool JSON Schemas (as pydantic writes them) → what strict providers accept.

Pydantic writes `anyOf: [X, {"type": "null"}]` with `default: null` and a
`title` for every optional field. OpenAI's strict mode wants every property
required (optional ones nullable), `additionalProperties: false` on every
object and a small keyword set; Gemini wants its OpenAPI subset (upper-case
types, `nullable`, no `additionalProperties`, `anyOf` of null, `title` or
`default`). Neither can say "a map of free-form keys": optional properties of
that kind (e.g. `shell.env`) are left out of those catalogs, which only means
the model cannot use them — null/absent is what the tool then receives.
Arguments are still validated against the full model by the registry.
"""

from __future__ import annotations

import copy
from typing import Any

Schema = dict[str, Any]

# Keywords OpenAI documents for strict function schemas.
_STRICT_KEYS = {
    "type",
    "description",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "anyOf",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
}
# Fields of Gemini's `Schema` (REST spelling) that toolrt's schemas use.
_GEMINI_KEYS = {
    "description",
    "enum",
    "items",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
}
_GEMINI_FORMATS = {"string": {"enum", "date-time"}, "number": {"float", "double"}}
_GEMINI_FORMATS["integer"] = {"int32", "int64"}


class NotStrict(ValueError):
    """The schema cannot be expressed in a strict/Gemini catalog."""


def inline_refs(schema: Schema) -> Schema:
    """A copy with every local `$ref` replaced by its definition (no `$defs`)."""
    defs = schema.get("$defs", {})

    def walk(node: Any, depth: int) -> Any:
        if depth > 32:
            msg = "schema nests too deep (a recursive $ref?)"
            raise NotStrict(msg)
        if isinstance(node, list):
            return [walk(item, depth + 1) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            target = walk(defs[ref.removeprefix("#/$defs/")], depth + 1)
            extra = {k: walk(v, depth + 1) for k, v in node.items() if k != "$ref"}
            return {**target, **extra}
        return {k: walk(v, depth + 1) for k, v in node.items() if k != "$defs"}

    return walk(copy.deepcopy(schema), 0)  # type: ignore[no-any-return]


def split_null(node: Schema) -> tuple[Schema, bool]:
    """(the schema without its null alternative, whether null was allowed)."""
    options = node.get("anyOf")
    if isinstance(options, list):
        rest = [o for o in options if o != {"type": "null"}]
        if len(rest) < len(options):
            outer = {k: v for k, v in node.items() if k != "anyOf"}
            inner = rest[0] if len(rest) == 1 else {"anyOf": rest}
            return {**inner, **outer}, True
    kind = node.get("type")
    if isinstance(kind, list) and "null" in kind:
        rest_types = [t for t in kind if t != "null"]
        return {**node, "type": rest_types[0] if len(rest_types) == 1 else rest_types}, True
    return node, False


def is_free_map(node: Schema) -> bool:
    """An object whose keys are not known in advance (not one with no keys)."""
    return (
        node.get("type") == "object"
        and not node.get("properties")
        and node.get("additionalProperties", True) is not False
    )


def _optional_free_map(node: Schema, required: bool) -> bool:
    return not required and is_free_map(split_null(node)[0])


# -- OpenAI strict --------------------------------------------------------
def _strict(node: Schema, nullable: bool) -> Schema:
    node, was_nullable = split_null(node)
    out: Schema = {k: v for k, v in node.items() if k in _STRICT_KEYS}
    if "anyOf" in out:
        out["anyOf"] = [_strict(o, False) for o in out["anyOf"]]
    if node.get("type") == "object":
        if is_free_map(node):
            msg = "free-form objects cannot be strict"
            raise NotStrict(msg)
        required = set(node.get("required", ()))
        props = {
            name: _strict(prop, name not in required)
            for name, prop in node.get("properties", {}).items()
            if not _optional_free_map(prop, name in required)
        }
        out.update(properties=props, required=list(props), additionalProperties=False)
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        out["items"] = _strict(node["items"], False)
    if nullable or was_nullable:
        out = _with_null(out)
    return out


def _with_null(out: Schema) -> Schema:
    kind = out.get("type")
    if kind in ("string", "number", "integer", "boolean") and "anyOf" not in out:
        out["type"] = [kind, "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        return out
    described = {k: out.pop(k) for k in ("description",) if k in out}
    return {"anyOf": [out, {"type": "null"}], **described}


def openai_strict(schema: Schema) -> Schema:
    """The schema OpenAI accepts with `strict: true`; NotStrict if impossible."""
    return _strict(inline_refs(schema), False)


def openai_loose(schema: Schema) -> Schema:
    """For tools that cannot be strict: the schema with refs inlined."""
    loose = inline_refs(schema)
    loose.pop("title", None)
    return loose


# -- Gemini ---------------------------------------------------------------
def _gemini(node: Schema) -> Schema:
    node, nullable = split_null(node)
    out: Schema = {k: v for k, v in node.items() if k in _GEMINI_KEYS}
    kind = node.get("type")
    if "const" in node:
        out["enum"] = [node["const"]]
    if "anyOf" in node:
        out["anyOf"] = [_gemini(o) for o in node["anyOf"]]
    if isinstance(kind, str):
        out["type"] = kind.upper()
        fmt = node.get("format")
        if fmt in _GEMINI_FORMATS.get(kind, ()):
            out["format"] = fmt
    if "enum" in out:
        out["enum"] = [str(v) for v in out["enum"] if v is not None]
    if isinstance(node.get("items"), dict):
        out["items"] = _gemini(node["items"])
    if kind == "object" and node.get("properties"):
        required = set(node.get("required", ()))
        out["properties"] = {
            name: _gemini(prop)
            for name, prop in node["properties"].items()
            if not _optional_free_map(prop, name in required)
        }
        kept = [name for name in node.get("required", ()) if name in out["properties"]]
        if kept:
            out["required"] = kept
    if nullable:
        out["nullable"] = True
    return out


def gemini_schema(schema: Schema) -> Schema:
    """The schema in the OpenAPI subset Gemini function declarations accept."""
    return _gemini(inline_refs(schema))
