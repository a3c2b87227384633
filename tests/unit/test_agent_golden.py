"""The golden frames both agents' codecs are held to (scripts/gen_agent_golden.py).

The static agent (static-agent/, Go) checks the same files in `go test`: NAME.frame
decodes and encodes back to the same bytes, NAME.in decodes to what
NAME.frame holds, and a bad-*.in is refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.agent import protocol

GOLDEN = Path(__file__).resolve().parents[2] / "static-agent" / "protocol" / "testdata" / "golden"
FILES = sorted(GOLDEN.iterdir())


def decode_one(data: bytes) -> tuple[protocol.Frame, protocol.Message]:
    frames = protocol.Decoder().feed(data)
    assert len(frames) == 1
    return frames[0], frames[0].message()


@pytest.mark.parametrize("path", [p for p in FILES if not p.name.startswith("bad-")], ids=str)
def test_a_golden_frame_decodes_and_encodes_back(path: Path) -> None:
    frame, message = decode_one(path.read_bytes())
    want = path.with_suffix(".frame").read_bytes()
    assert protocol.encode(message, frame.request_id, frame.epoch, frame.body) == want


@pytest.mark.parametrize("path", [p for p in FILES if p.name.startswith("bad-")], ids=str)
def test_a_bad_golden_frame_is_refused(path: Path) -> None:
    with pytest.raises(protocol.FrameError):
        decode_one(path.read_bytes())


def test_every_message_has_golden_frames() -> None:
    names = {p.name for p in FILES}
    for cls in protocol.REQUESTS + protocol.REPLIES + protocol.EVENTS:
        assert {f"{cls.OP}-full.frame", f"{cls.OP}-defaults.frame"} <= names
