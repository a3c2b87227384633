"""Write the redaction cases the static agent is held to (static-agent/testdata/redact.json).

runtime/agent/redact.py is the one definition of how secrets are redacted;
these cases are what it answers, and `go test` in static-agent checks that
the Go redactor answers the same bytes: whole redactions (with and without a
cut before or after), streams fed in pieces, base64 forms, environments,
kept exports and the Secrets body. Random but seeded: the file only changes
when redact.py does. `make agent-proto-check` regenerates it and fails on a
difference.
"""

from __future__ import annotations

import base64
import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runtime.agent import redact  # noqa: E402
from runtime.agent.redact import Redactor  # noqa: E402

OUT = ROOT / "static-agent" / "testdata" / "redact.json"

# Secret sets chosen for the edges: a value holding another, values sharing
# a start, short values (no base64 forms, shorter than a fragment), bytes
# whose base64 holds + and /, non-ASCII text.
SECRET_SETS: list[dict[str, str]] = [
    {"GITHUB_TOKEN": "ghp_Zx9Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz", "PW": "hunter2-long"},
    {"TOKEN": "ghp_S3cr3t>>>???~~~valueZ9" + "q" * 10},
    {"A": "abcdefgh", "B": "abcdefghijkl", "C": "xyz"},
    {"SHORT": "ab", "ONE": "q", "MID": "hunt"},
    {"UNI": "caf\u00e9-\U0001f600-\u00fc\u00df\u00e9\u00e9", "Z_1": "zzzzzzzzzz"},
    {"SAME_A": "samevalue1", "SAME_B": "samevalue1", "OTHER": "samevalue12"},
    {},
]


def pieces_of(secrets: dict[str, str]) -> list[bytes]:
    """Bytes to build data from: the values, their forms, pieces of them."""
    parts: list[bytes] = [b"x", b"\n", b" ", b"\xff\xfe", b"\xe2\x82", b"${", b"}", b"=="]
    for value in secrets.values():
        raw = value.encode()
        parts += [
            raw,
            raw[:3],
            raw[:4],
            raw[-3:],
            raw[-4:],
            raw[: len(raw) // 2],
            raw[len(raw) // 2 :],
        ]
        for form in redact.base64_forms(raw):
            parts += [form, form[:3], form[:6], form[-3:], form[-6:]]
        parts.append(base64.b64encode(b"Basic " + raw))
    return parts


def data_for(rng: random.Random, secrets: dict[str, str]) -> bytes:
    parts = pieces_of(secrets)
    return b"".join(rng.choice(parts) for _ in range(rng.randint(0, 12)))


def split(rng: random.Random, data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        step = rng.randint(1, 9)
        out.append(data[pos : pos + step])
        pos += step
    return out


def cases_for(rng: random.Random, secrets: dict[str, str]) -> dict[str, Any]:
    r = Redactor(secrets)
    redactions = []
    for _ in range(80):
        data = data_for(rng, secrets)
        before, after = rng.random() < 0.4, rng.random() < 0.4
        out = r.redact(data, cut_before=before, cut_after=after)
        redactions.append([data.hex(), before, after, out.hex()])
    streams = []
    for _ in range(30):
        stream = r.stream()
        fed = split(rng, data_for(rng, secrets) + data_for(rng, secrets))
        outs = [stream.feed(piece).hex() for piece in fed]
        streams.append([[p.hex() for p in fed], outs, stream.flush().hex()])
    names = sorted(secrets) + ["NOPE"]
    env = {
        f"V{i}": "".join(
            rng.choice(["${" + rng.choice(names) + "}", "$", "{", "}", "a", " ", *secrets.values()])
            for _ in range(rng.randint(0, 6))
        )
        for i in range(8)
    }
    env.update({name: secrets[name] for name in list(secrets)[:1]})
    encoded = {f"E{i}": f"x{form.decode()}y" for i, form in enumerate(r.forms[:3])}
    kept, notes = r.references({**env, **encoded})
    return {
        "secrets": secrets,
        "forms": {
            v: [f.decode() for f in redact.base64_forms(v.encode())] for v in secrets.values()
        },
        "redact": redactions,
        "stream": streams,
        "environment": [env, r.environment(env)],
        "references": [{**env, **encoded}, kept, notes],
    }


# Secrets bodies: those decode_secrets takes (and what it makes of them), those it refuses.
BODIES = [
    b'{"A": "v", "B_2": "w"}',
    b"{}",
    b"[]",
    b"null",
    b'"A"',
    b'{"1X": "v"}',
    b'{"A": ""}',
    b'{"A": 1}',
    b'{"A-B": "v"}',
    b'{"' + b"N" * 128 + b'": "v"}',
    b'{"' + b"N" * 129 + b'": "v"}',
    b"{not json",
]


def decoded(body: bytes) -> Any:
    try:
        return redact.decode_secrets(body)
    except ValueError:
        return None


def main() -> int:
    rng = random.Random(24)
    cases = {
        "sets": [cases_for(rng, secrets) for secrets in SECRET_SETS],
        "bodies": [[body.decode(), decoded(body)] for body in BODIES],
    }
    OUT.write_text(json.dumps(cases, indent=0, sort_keys=True) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
