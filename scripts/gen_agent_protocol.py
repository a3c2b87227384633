"""Generate the static agent's message types (Go) from runtime/agent/protocol.py.

protocol.py stays the one definition of every message, its fields, their
order and their defaults; this writes static-agent/protocol/messages_gen.go from
it: a struct per message, a constructor with the defaults, an exact-key
decoder (JSON absent → default, wrong type or null → error, as
`protocol.from_dict`) and an encoder writing the fields in protocol.py's
order, so both sides put the same bytes on the wire (the golden frames in
static-agent/protocol/testdata/golden check it: scripts/gen_agent_golden.py).
`make agent-proto-check` fails when the committed file differs.
"""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runtime.agent import protocol, records  # noqa: E402

OUT = ROOT / "static-agent" / "protocol" / "messages_gen.go"
CONSTANTS = (
    "VERSION",
    "MAX_HEADER",
    "MAX_BODY",
    "NOT_FOUND",
    "PATH_DENIED",
    "INVALID_ARGUMENTS",
    "LIMIT_EXCEEDED",
    "TIMEOUT",
    "INTERNAL",
    "OUTCOME_UNKNOWN",
    "FILE_NOT_FOUND",
    "PERMISSION_DENIED",
    "IS_A_DIRECTORY",
    "NOT_A_DIRECTORY",
    "FILE_TOO_LARGE",
    "FILE_EXISTS",
    "NO_SPACE",
    "INVALID_REQUEST",
    "USER_NOT_ALLOWED",
    "WORKSPACE",
    "TMP",
    "SANDBOX_UID",
    "SANDBOX_GID",
    "FILE_OP_SECONDS",
    "CHUNK_BYTES",
    "WINDOW_CHUNKS",
    "TTY_ROWS",
    "TTY_COLS",
)


def go_name(name: str) -> str:
    special = {"id": "ID", "s": "S", "ms": "MS"}
    return "".join(special.get(p, p[:1].upper() + p[1:]) for p in name.split("_"))


def go_type(tp: Any) -> tuple[str, bool]:
    """(Go type, nullable) of a field's Python type."""
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        [inner] = [a for a in typing.get_args(tp) if a is not type(None)]
        inner_type, _ = go_type(inner)
        if inner_type.startswith(("[]", "map[")):
            return inner_type, True
        return "*" + inner_type, True
    if origin is list:
        return "[]" + go_type(typing.get_args(tp)[0])[0], False
    if origin is dict:
        key, value = typing.get_args(tp)
        if key is not str:
            raise TypeError(tp)
        return "map[string]" + go_type(value)[0], False
    scalars = {str: "string", int: "int64", float: "float64", bool: "bool"}
    if tp in scalars:
        return scalars[tp], False
    if isinstance(tp, type) and issubclass(tp, protocol.Message):
        return tp.__name__, False
    raise TypeError(tp)


def go_literal(value: Any, gtype: str) -> str:
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return go_string(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, protocol.Message):
        return f"New{type(value).__name__}()"
    if isinstance(value, list):
        if value:
            raise ValueError(value)
        return f"{gtype}{{}}"
    if isinstance(value, dict):
        if value:
            raise ValueError(value)
        return f"{gtype}{{}}"
    raise TypeError(value)


def go_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def encoder_call(name: str, gtype: str, nullable: bool) -> str:
    """The statement writing field `name` (Go type `gtype`) to encoder `e`."""
    value = f"m.{go_name(name)}"
    scalars = {"string": "str", "int64": "int", "float64": "float", "bool": "boolean"}
    if gtype.startswith("*"):
        inner = gtype[1:]
        if inner in scalars:
            return f'e.opt{inner.capitalize()}("{name}", {value})'
        return f'optMessage(e, "{name}", {value})'
    if gtype == "[]string":
        return f'e.strings("{name}", {value})'
    if gtype.startswith("[]"):
        return f'messageList(e, "{name}", {value})'
    if gtype.startswith("map["):
        return f'e.stringMap("{name}", {value}, {str(nullable).lower()})'
    if gtype in scalars:
        return f'e.{scalars[gtype]}("{name}", {value})'
    return f'e.message("{name}", &{value})'


def messages() -> list[type[protocol.Message]]:
    seen: list[type[protocol.Message]] = []

    def visit(cls: type[protocol.Message]) -> None:
        if cls in seen:
            return
        seen.append(cls)
        hints = typing.get_type_hints(cls, vars(protocol))
        for name in records.fields(cls):
            for arg in [hints[name], *typing.get_args(hints[name])]:
                if isinstance(arg, type) and issubclass(arg, protocol.Message):
                    visit(arg)

    for cls in protocol.REQUESTS + protocol.REPLIES + protocol.EVENTS:
        visit(cls)
    return seen


def struct(cls: type[protocol.Message]) -> str:
    hints = typing.get_type_hints(cls, vars(protocol))
    names = records.fields(cls)
    default = cls()
    doc = (cls.__doc__ or "").strip().splitlines()
    lines = []
    if doc and not doc[0].startswith(cls.__name__ + "("):
        lines.append(f"// {cls.__name__}: {doc[0]}")
    lines.append(f"type {cls.__name__} struct {{")
    for name in names:
        gtype, _ = go_type(hints[name])
        lines.append(f"\t{go_name(name)} {gtype}")
    lines.append("}\n")
    lines.append(f"// New{cls.__name__} is a {cls.__name__} with protocol.py's defaults.")
    lines.append(f"func New{cls.__name__}() {cls.__name__} {{")
    lines.append(f"\treturn {cls.__name__}{{")
    for name in names:
        gtype, _ = go_type(hints[name])
        lines.append(f"\t\t{go_name(name)}: {go_literal(getattr(default, name), gtype)},")
    lines.append("\t}\n}\n")
    op = cls.OP
    if op:
        lines.append(f'func (*{cls.__name__}) Op() string {{ return "{op}" }}\n')
    lines.append(f"func (m *{cls.__name__}) encodeFields(e *encoder) {{")
    for name in names:
        gtype, nullable = go_type(hints[name])
        lines.append(f"\t{encoder_call(name, gtype, nullable)}")
    lines.append("}\n")
    lines.append(f"func (m *{cls.__name__}) decodeFields(raw map[string]json.RawMessage) error {{")
    for name in names:
        _, nullable = go_type(hints[name])
        where = f"{cls.__name__}.{name}"
        lines.append(
            f'\tif err := field(raw, "{name}", &m.{go_name(name)}, {str(nullable).lower()}, '
            f'"{where}"); err != nil {{\n\t\treturn err\n\t}}'
        )
    lines.append("\treturn nil\n}\n")
    lines.append(
        f"// UnmarshalJSON: absent fields keep their defaults, as protocol.from_dict.\n"
        f"func (m *{cls.__name__}) UnmarshalJSON(data []byte) error {{\n"
        f"\t*m = New{cls.__name__}()\n"
        f'\treturn decodeObject(data, "{cls.__name__}", m.decodeFields)\n}}\n'
    )
    return "\n".join(lines)


def constant(name: str) -> str:
    value = getattr(protocol, name)
    literal = go_string(value) if isinstance(value, str) else repr(value)
    return f"\t{go_name(name.lower())} = {literal}"


def render() -> str:
    classes = messages()
    ops = [c for c in classes if c.OP]
    out = [
        "// Code generated by scripts/gen_agent_protocol.py from runtime/static-agent/protocol.py. "
        "DO NOT EDIT.\n",
        "package protocol\n",
        'import "encoding/json"\n',
        "const (",
        *[constant(name) for name in CONSTANTS],
        ")\n",
    ]
    out += [struct(cls) for cls in classes]
    out.append("// Kinds: the message of each op, made with its defaults.")
    out.append("var kinds = map[string]func() Message{")
    for cls in ops:
        out.append(f'\t"{cls.OP}": func() Message {{ m := New{cls.__name__}(); return &m }},')
    out.append("}\n")
    for group in ("REQUESTS", "REPLIES", "EVENTS"):
        names = ", ".join(f'"{c.OP}"' for c in getattr(protocol, group))
        out.append(f"// {go_name(group.lower())} are protocol.{group}'s ops.")
        out.append(f"var {go_name(group.lower())} = []string{{{names}}}\n")
    return "\n".join(out)


def main() -> int:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render())
    subprocess.run(["gofmt", "-w", str(OUT)], check=True)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
