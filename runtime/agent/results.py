"""Calls' answers kept until the daemon has stored them, and resyncs.

The engine drops what the agent writes while no daemon is attached, and a
daemon may die between a call's answer and storing it. So every answer of
a call with a call id is kept here, by call id, until the daemon's Ack says
it is stored. A later daemon learns from the hello which calls still run
and which answers wait, and gets an answer by sending the call again with
`resume`: a kept answer comes back at once, a running call answers that
request too when it ends, and a call id never seen runs as new.

Bounded: at most KEEP_COUNT answers and KEEP_BYTES of them; past that the
oldest is dropped and its id remembered (SEEN_IDS of those), so a resume
of it says OUTCOME_UNKNOWN rather than run it twice.

A daemon that died mid-write leaves half a frame in the agent's decoder.
The next one, once attached, signals the agent (SIGUSR1): the agent drops
what it buffered and what is still queued on its input, then sends a Resync
frame; the daemon writes nothing before it sees that frame.

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from . import protocol
from .ops import operation

if TYPE_CHECKING:
    from .calls import Call
    from .loop import Agent

KEEP_COUNT = 1024
KEEP_BYTES = 64 << 20
SEEN_IDS = 65536

Answer = Tuple[protocol.Message, bytes]


class Kept:
    """Answers by call id, oldest first, and ids seen."""

    def __init__(self, count: int = KEEP_COUNT, size: int = KEEP_BYTES) -> None:
        self.count = count
        self.size = size
        self.answers: "OrderedDict[str, Answer]" = OrderedDict()
        self.bytes = 0
        self.seen: "OrderedDict[str, None]" = OrderedDict()

    def saw(self, call_id: str) -> None:
        self.seen[call_id] = None
        self.seen.move_to_end(call_id)
        while len(self.seen) > SEEN_IDS:
            self.seen.popitem(last=False)

    def keep(self, call_id: str, message: protocol.Message, body: bytes) -> None:
        self.saw(call_id)
        old = self.answers.pop(call_id, None)
        if old is not None:
            self.bytes -= len(old[1])
        self.answers[call_id] = (message, body)
        self.bytes += len(body)
        while self.answers and (len(self.answers) > self.count or self.bytes > self.size):
            _, (_, dropped) = self.answers.popitem(last=False)
            self.bytes -= len(dropped)

    def ack(self, call_ids: List[str]) -> None:
        for call_id in call_ids:
            answer = self.answers.pop(call_id, None)
            if answer is not None:
                self.bytes -= len(answer[1])


class ResultOps:
    """The agent's methods for answering calls (a mixin of loop.Agent)."""

    kept: Kept
    # Calls by call id from their start until they are answered.
    running: Dict[str, "Call"]
    # Requests (id, epoch) of later daemons waiting for a running call's answer.
    waiters: Dict[str, List[Tuple[int, int]]]
    decoder: protocol.Decoder
    proto_in: int
    epoch: int

    if TYPE_CHECKING:

        def send(
            self,
            message: protocol.Message,
            rid: int,
            body: bytes = b"",
            epoch: Optional[int] = None,
        ) -> None: ...
        def fail(self, rid: int, code: str, message: str) -> None: ...

    def answer_call(self, call: "Call", message: protocol.Message, body: bytes = b"") -> None:
        """A call's one answer: kept by call id, sent to whoever asked for it."""
        call_id = call.request.call_id
        if call_id:
            self.running.pop(call_id, None)
            self.kept.keep(call_id, message, body)
        self.send(message, call.rid, body, call.epoch)
        for rid, epoch in self.waiters.pop(call_id, []) if call_id else []:
            self.send(message, rid, body, epoch)

    def resumed(self, rid: int, request: protocol.Exec) -> bool:
        """Answer (now or when it ends) a resumed call this agent knows; False
        if it never saw the call id, which then runs as new."""
        call_id = request.call_id
        if not (request.resume and call_id):
            return False
        if call_id in self.running:
            self.waiters.setdefault(call_id, []).append((rid, self.epoch))
            return True
        answer = self.kept.answers.get(call_id)
        if answer is not None:
            self.send(answer[0], rid, answer[1])
            return True
        if call_id in self.kept.seen:
            self.fail(
                rid,
                protocol.OUTCOME_UNKNOWN,
                "the sandbox ran this call but no longer keeps its result "
                f"(it keeps the latest {self.kept.count}); it was not run again",
            )
            return True
        return False

    def resync(self) -> None:
        """Drop a previous daemon's partial frame and queued input; say so."""
        while True:
            try:
                if not os.read(self.proto_in, 1 << 16):
                    break
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
        self.decoder.resync()
        self.send(protocol.Resync(pid=os.getpid()), 0, b"", 0)


@operation(protocol.Ack)
def op_ack(agent: "Agent", rid: int, request: protocol.Ack, body: bytes) -> None:
    agent.kept.ack(request.call_ids)
