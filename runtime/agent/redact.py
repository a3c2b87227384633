"""A session's secrets: how they travel to the agent, and their redaction.

The daemon sends the session's secrets once (the `secrets` op, values in the
frame's body, never on a command line or in an environment the sandbox user
can read; the agent's memory is root's). From then on every command gets
them as environment variables, and every value (and its base64 forms) is
replaced by `[REDACTED:NAME]` in what the agent answers: command output
before it is cut to head and tail or streamed, background output, file
reads and text files of archives. This module is the one definition: the
static agent's redact.go is held to it byte for byte (the cases
scripts/gen_agent_redact.py writes), and the daemon redacts with it what it
builds itself from file contents.

Redaction is a safety net, not a boundary: a command can print a secret
reversed, hex-encoded or a byte at a time, and nothing here catches that.

"""

from __future__ import annotations

import base64
import json
import re
from typing import Dict, List, Optional, Pattern, Tuple

# Names as environment variables may carry them.
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Base64 cores shorter than this are not redacted: they would match ordinary text.
MIN_BASE64 = 8
# A piece of a secret this long, left at a cut (a byte cap, a head or tail),
# is redacted too: a prefix or suffix that long is enough to guess from.
MIN_FRAGMENT = 4
URLSAFE = bytes.maketrans(b"+/", b"-_")
# How many leading characters of base64(k prefix bytes + value) depend on the prefix.
_LEADING = (0, 2, 3)


def mark(name: str) -> bytes:
    return f"[REDACTED:{name}]".encode()


def base64_forms(value: bytes) -> List[bytes]:
    """The base64 text (standard and URL-safe) of `value` wherever it sits in
    a longer string: for each of the three alignments, the characters that
    depend on the value's bytes alone."""
    forms: List[bytes] = []
    for k in range(3):
        encoded = base64.b64encode(b"\0" * k + value).rstrip(b"=")
        # A last character shared with the bytes that follow is left out.
        end = len(encoded) - (1 if (k + len(value)) % 3 else 0)
        core = encoded[_LEADING[k] : end]
        if len(core) >= MIN_BASE64:
            for form in (core, core.translate(URLSAFE)):
                if form not in forms:
                    forms.append(form)
    return forms


def encode_secrets(secrets: Dict[str, str]) -> bytes:
    """The body of a Secrets request."""
    return json.dumps(secrets, sort_keys=True).encode()


def decode_secrets(body: bytes) -> Dict[str, str]:
    data = json.loads(body.decode("utf-8"))
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and NAME.fullmatch(k) and isinstance(v, str) and v
        for k, v in data.items()
    ):
        msg = "secrets: expected an object of NAME to non-empty string values"
        raise ValueError(msg)
    return {str(k): str(v) for k, v in data.items()}


class Redactor:
    """Every form of every secret of a session, and what replaces it."""

    def __init__(self, secrets: Optional[Dict[str, str]] = None) -> None:
        self.secrets: Dict[str, str] = dict(secrets or {})
        self._names: Dict[bytes, str] = {}
        self._raw: List[Tuple[str, str]] = []
        for name in sorted(self.secrets):
            raw = self.secrets[name].encode()
            self._raw.append((name, self.secrets[name]))
            for form in [raw, *base64_forms(raw)]:
                self._names.setdefault(form, name)
        # Longest first: of the forms that start at one place, the longest wins.
        self._raw.sort(key=lambda item: -len(item[1]))
        patterns = sorted(self._names, key=len, reverse=True)
        self.forms = patterns
        self.first_bytes = frozenset(p[0] for p in patterns)
        self.regex: Optional[Pattern[bytes]] = (
            re.compile(b"|".join(re.escape(p) for p in patterns)) if patterns else None
        )
        self.longest = len(patterns[0]) if patterns else 0
        self._refs: Optional[Pattern[str]] = (
            re.compile(r"\$\{(" + "|".join(map(re.escape, self.secrets)) + r")\}")
            if self.secrets
            else None
        )

    def __repr__(self) -> str:
        # Never the values.
        return f"Redactor(names={sorted(self.secrets)})"

    def _replace(self, match: re.Match[bytes]) -> bytes:
        return mark(self._names[match.group()])

    def redact(self, data: bytes, cut_before: bool = False, cut_after: bool = False) -> bytes:
        """`data` with every form of every secret replaced; `cut_before` /
        `cut_after` say that a cut precedes / follows it, so the end of a
        secret it begins with / the start of one it ends with goes too."""
        if self.regex is None:
            return data
        data = self.regex.sub(self._replace, data)
        if cut_before:
            data = self._fragment(data, leading=True)
        if cut_after:
            data = self._fragment(data, leading=False)
        return data

    def _fragment(self, data: bytes, leading: bool) -> bytes:
        """`data` with the longest piece (MIN_FRAGMENT bytes or more) of a
        form that it starts with (a suffix) or ends with (a prefix) replaced."""
        best, name = 0, ""
        for form, owner in self._names.items():
            for size in range(min(len(form) - 1, len(data)), max(MIN_FRAGMENT, best + 1) - 1, -1):
                piece = form[len(form) - size :] if leading else form[:size]
                if data.startswith(piece) if leading else data.endswith(piece):
                    best, name = size, owner
                    break
        if not best:
            return data
        return mark(name) + data[best:] if leading else data[: len(data) - best] + mark(name)

    def redact_text(self, text: str, cut_before: bool = False, cut_after: bool = False) -> str:
        if self.regex is None:
            return text
        # surrogatepass: any lone surrogate (a name that is not UTF-8) goes
        # there and back unchanged, and no secret (UTF-8 text) holds one.
        return self.redact(text.encode("utf-8", "surrogatepass"), cut_before, cut_after).decode(
            "utf-8", "surrogatepass"
        )

    def found(self, data: bytes) -> bool:
        return self.regex is not None and self.regex.search(data) is not None

    def found_text(self, text: str) -> bool:
        return self.found(text.encode("utf-8", "surrogatepass"))

    def stream(self) -> Stream:
        return Stream(self)

    # -- environments ------------------------------------------------------
    def environment(self, env: Dict[str, str]) -> Dict[str, str]:
        """A command's environment: the secrets, then `env` with each
        `${NAME}` of a secret expanded (persisted exports keep references)."""
        merged = dict(self.secrets)
        for key, value in env.items():
            if self._refs is not None:
                value = self._refs.sub(lambda m: self.secrets[m.group(1)], value)
            merged[key] = value
        return merged

    def references(self, env: Dict[str, str]) -> Tuple[Dict[str, str], List[str]]:
        """A shell's exports as the daemon may keep them: the secrets' own
        variables left out, a value holding a secret with `${NAME}` in its
        place, and one holding an encoded form not kept (with a note)."""
        kept: Dict[str, str] = {}
        refused: List[str] = []
        for key, value in env.items():
            if self.secrets.get(key) == value:
                continue
            for name, secret in self._raw:
                value = value.replace(secret, "${" + name + "}")
            if self.found(value.encode("utf-8", "surrogateescape")):
                refused.append(key)
                continue
            kept[key] = value
        notes = []
        if refused:
            notes.append(
                f"not kept for later calls: {', '.join(sorted(refused))} (the value holds "
                "an encoded secret; compute it again in each command)"
            )
        return kept, notes


class Stream:
    """Redacts a stream that arrives in pieces. Bytes at the end of a piece
    that could begin a secret (or a base64 form of one) wait for the next
    piece, so a secret split across two is still caught; output that could
    not begin one is never held back."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self.held = b""

    def feed(self, data: bytes) -> bytes:
        redactor = self.redactor
        if redactor.regex is None:
            return data
        buf = self.held + data
        hold = self._unfinished(buf)
        out: List[bytes] = []
        pos = 0
        for match in redactor.regex.finditer(buf):
            # A form that starts before `hold` cannot grow into a longer one.
            if match.start() >= hold:
                break
            out.append(buf[pos : match.start()])
            out.append(redactor._replace(match))
            pos = match.end()
        upto = max(hold, pos)
        out.append(buf[pos:upto])
        self.held = buf[upto:]
        return b"".join(out)

    def _unfinished(self, buf: bytes) -> int:
        """Where the first tail of `buf` that is a proper prefix of a form starts."""
        redactor = self.redactor
        for start in range(max(0, len(buf) - redactor.longest + 1), len(buf)):
            if buf[start] not in redactor.first_bytes:
                continue
            tail = buf[start:]
            if any(len(form) > len(tail) and form.startswith(tail) for form in redactor.forms):
                return start
        return len(buf)

    def flush(self) -> bytes:
        """What is held back, redacted: the stream has ended."""
        data, self.held = self.held, b""
        return self.redactor.redact(data)
