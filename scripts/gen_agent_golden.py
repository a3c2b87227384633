"""Write the golden frames both agents' codecs are held to.

For every message of runtime/static-agent/protocol.py, in static-agent/protocol/testdata/golden:
- `OP-full.frame`: the message with a value unlike its default in every field
  (non-ASCII text, an astral character, escapes, floats, nested messages);
- `OP-defaults.frame`: the message with its defaults, and `OP-defaults.in`,
  a header naming only op, id and epoch, which must decode to it;
- `bad-*.in`: frames both decoders must refuse.
(static-agent/testdata also holds the commands' syscall filter per
architecture and the shell-state trap as the Python agent, since removed,
wrote them: fixed vectors the static agent's tests keep it to.)

The rule both sides test (tests/unit/test_agent_golden.py, `go test` in
static-agent/protocol): NAME.frame decodes and encodes back to the same bytes;
NAME.in decodes to what NAME.frame holds; a bad-*.in is refused.
`make agent-proto-check` regenerates them and fails on a difference.
"""

from __future__ import annotations

import json
import shutil
import struct
import sys
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runtime.agent import protocol, records  # noqa: E402

GOLDEN = ROOT / "static-agent" / "protocol" / "testdata" / "golden"
TEXT = 'caf\u00e9 \U0001f600 "quoted" \\ \n\t\x01\x7f'


def sample_value(tp: Any, default: Any, depth: int) -> Any:
    """A JSON-able value of type `tp` that is not `default`."""
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        [inner] = [a for a in typing.get_args(tp) if a is not type(None)]
        return sample_value(inner, None, depth)
    if origin is list:
        (item,) = typing.get_args(tp)
        return [sample_value(item, None, depth), sample_value(item, None, depth)]
    if origin is dict:
        return {"A_NAME": TEXT, "B": ""}
    if tp is bool:
        return not default
    if tp is int:
        return 1234567890123 if default != 1234567890123 else 7
    if tp is float:
        return 0.1 if default != 0.1 else 2.5e-05
    if tp is str:
        return TEXT + str(depth)
    if isinstance(tp, type) and issubclass(tp, protocol.Message):
        return full(tp, depth + 1)
    raise TypeError(tp)


def full(cls: type[protocol.Message], depth: int = 0) -> protocol.Message:
    hints = typing.get_type_hints(cls, vars(protocol))
    default = cls()
    values = {
        name: sample_value(hints[name], getattr(default, name), depth)
        for name in records.fields(cls)
    }
    return cls(**values)


def frame(header: bytes, body: bytes = b"") -> bytes:
    return protocol.PREFIX.pack(protocol.MAGIC, len(header), len(body)) + header + body


BAD = {
    "not-json": frame(b"{op:"),
    "not-an-object": frame(b"[1,2]"),
    "no-op": frame(b'{"id":1,"epoch":0}'),
    "string-id": frame(b'{"op":"ping","id":"1","epoch":0}'),
    "unknown-op": frame(b'{"op":"no_such_op","id":1,"epoch":0}'),
    "wrong-type": frame(b'{"op":"exec","id":1,"epoch":0,"timeout_s":"60"}'),
    "bool-for-int": frame(b'{"op":"hello","id":1,"epoch":0,"version":true}'),
    "float-for-int": frame(b'{"op":"hello","id":1,"epoch":0,"version":4.0}'),
    "null-for-str": frame(b'{"op":"exec","id":1,"epoch":0,"command":null}'),
    "list-of-wrong": frame(b'{"op":"ack","id":1,"epoch":0,"call_ids":[1]}'),
    "nested-wrong": frame(b'{"op":"exit","id":1,"epoch":0,"stdout":[]}'),
    "too-large": struct.pack(">4sII", protocol.MAGIC, protocol.MAX_HEADER + 1, 0),
}


def main() -> int:
    if GOLDEN.exists():
        shutil.rmtree(GOLDEN)
    GOLDEN.mkdir(parents=True)
    classes = protocol.REQUESTS + protocol.REPLIES + protocol.EVENTS
    for n, cls in enumerate(classes):
        rid, epoch = 1000 + n, 7 + n
        body = bytes(range(256)) if n % 2 else b""
        (GOLDEN / f"{cls.OP}-full.frame").write_bytes(protocol.encode(full(cls), rid, epoch, body))
        (GOLDEN / f"{cls.OP}-defaults.frame").write_bytes(protocol.encode(cls(), rid, epoch))
        minimal = json.dumps({"op": cls.OP, "id": rid, "epoch": epoch}).encode()
        (GOLDEN / f"{cls.OP}-defaults.in").write_bytes(frame(minimal))
    for name, data in BAD.items():
        (GOLDEN / f"bad-{name}.in").write_bytes(data)
    print(f"wrote {len(list(GOLDEN.iterdir()))} files in {GOLDEN.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
