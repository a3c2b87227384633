"""Another tenant's `shell true` beside each attempt to exhaust a share, as ratios to alone.

One daemon (a `toolrt serve` child, bench/ours.py) with tenants bob and
alice, an audit log and network for alice. Bob's `shell true` runs in
blocks alternating between alice idle and alice attempting one exhaustion:

- audit: two of her sandboxes loop connects the proxy refuses (each a
  `network` event for the audit log);
- proxy: two of her sandboxes open and hold every proxy connection they can;
- transfers: she opens more UploadFiles streams than her share of the
  transfer slots, sends one chunk on each and stalls.

Reported, not judged: alice's sandboxes share the host's CPUs with bob's.

    make bench BENCH_ARGS='--only shares [--quick]'     (and in every make bench)
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import ours
from bench.stats import Sample, interleave
from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import Client

README_START = "<!-- bench:shares:start -->"
README_END = "<!-- bench:shares:end -->"
SANDBOXES = 2
TOML = """audit_log = "@TMP@/shares.audit.jsonl"
[network]
allow_max = ["*.test:*"]
"""
# Run as `python3 loop.py SECONDS` in a sandbox (tests/docker/test_noisy_tenants.py too).
# Connects the proxy refuses, each read to its end; prints how many.
REFUSED_LOOP = r"""
import socket, sys, time
n, end = 0, time.time() + float(sys.argv[1])
while time.time() < end:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.sendall(b"CONNECT h%d.evil.test:80 HTTP/1.1\r\n\r\n" % (n % 20))
    while s.recv(4096):
        pass
    s.close()
    n += 1
print("connections", n, flush=True)
"""
# Proxy connections opened and held (sending nothing), as many as will open.
HOLD_LOOP = r"""
import socket, sys, time
held, failed, end = [], 0, time.time() + float(sys.argv[1])
while time.time() < end:
    try:
        held.append(socket.create_connection(("127.0.0.1", 3128), timeout=2))
    except OSError:
        failed += 1
        time.sleep(0.01)
print("held", len(held), "failed", failed, flush=True)
"""
NOTE = (
    "Reported, not judged: alice's sandboxes run on the same CPUs as bob's, so on a small, "
    "busy host part of each ratio is her CPU use, not a share's; bob is never refused."
)
NAMES = {
    "alone": "bob `shell true`, alice idle",
    "audit": "beside alice's sandboxes looping refused connects (audit)",
    "proxy": "beside alice's sandboxes holding proxy connections (descriptors)",
    "transfers": "beside alice's stalled uploads, more than her share (transfer slots)",
}


class Looping:
    """A script looping in each of alice's sandboxes while switched on."""

    def __init__(self, client: Client, script: str) -> None:
        self.client = client
        self.script = script
        self.sessions = [
            client.create_session(network={"allow": ["web.test"]}).id for _ in range(SANDBOXES)
        ]
        self.processes: list[tuple[str, str]] = []

    def start(self) -> None:
        for session_id in self.sessions:
            self.client.call(session_id, "write_file", {"path": "loop.py", "content": self.script})
            started = self.client.call(
                session_id, "shell", {"command": "python3 loop.py 3600", "background": True}
            )
            self.processes.append((session_id, str(started.output["process_id"])))

    def stop(self) -> None:
        for session_id, process in self.processes:
            self.client.call(session_id, "process_kill", {"process_id": process})
        self.processes.clear()

    def close(self) -> None:
        for session_id in self.sessions:
            self.client.close_session(session_id)


class Stalled:
    """More uploads than alice's share of the slots, each stalled after a chunk."""

    def __init__(self, client: Client, streams: int) -> None:
        self.client = client
        self.streams = streams
        self.session = client.create_session().id
        self._resume = threading.Event()
        self._calls: list[Any] = []

    def _stalled(self) -> Iterator[pb.UploadFilesRequest]:
        yield pb.UploadFilesRequest(session_id=self.session, path="/workspace", tar=b"\0" * 512)
        self._resume.wait(600)

    def start(self) -> None:
        self._resume.clear()
        stub, metadata = self.client.stub, self.client.metadata
        self._calls = [
            stub.UploadFiles.future(self._stalled(), metadata=metadata, timeout=600)
            for _ in range(self.streams)
        ]

    def stop(self) -> None:
        self._resume.set()
        for call in self._calls:
            call.cancel()
        self._calls.clear()

    def close(self) -> None:
        self.client.close_session(self.session)


def measure(
    instance: str, log_path: str, quick: bool, daemons: list[ours.Daemon]
) -> dict[str, Sample]:
    """Bob's samples alone and beside each attempt; the daemon is appended to `daemons`."""
    with tempfile.TemporaryDirectory(prefix="toolrt-bench-") as tmp:
        d, tokens = ours.configured(
            f"{instance}-shares", log_path, Path(tmp), TOML, ["bob", "alice"]
        )
        daemons.append(d)
        alice = Client(d.target, token=tokens["alice"], timeout=120)
        attempts: dict[str, Any] = {
            "audit": Looping(alice, REFUSED_LOOP),
            "proxy": Looping(alice, HOLD_LOOP),
            "transfers": Stalled(alice, streams=6),
        }
        s = {key: Sample(f"toolrt Execute shell true, {name}") for key, name in NAMES.items()}
        bob = d.client.create_session().id
        call: Callable[[], Any] = lambda: ours.shell(d.client, bob, "true")  # noqa: E731
        try:
            for _ in range(2 if quick else 6):
                interleave(1, [(s["alone"], 30, call)])
                for key, attempt in attempts.items():
                    attempt.start()
                    try:
                        interleave(1, [(s[key], 30, call)])
                    finally:
                        attempt.stop()
        finally:
            for attempt in attempts.values():
                attempt.close()
            d.client.close_session(bob)
            alice.close()
            d.stop()
    return s


def section(s: dict[str, Sample], measured: str) -> list[str]:
    """Markdown: bob's p50 and p99 beside each attempt, and their ratios to alone."""
    alone = s["alone"]
    lines = [
        "### Shares: another tenant beside each exhaustion attempt",
        "",
        measured,
        "",
        NOTE,
        "",
        "| bob's `shell true` | p50 | p99 | p50 / alone | p99 / alone |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, sample in s.items():
        lines.append(
            f"| {NAMES[key]} | {sample.p50 * 1e3:.2f} ms | {sample.p99 * 1e3:.2f} ms "
            f"| {sample.p50 / alone.p50:.2f} | {sample.p99 / alone.p99:.2f} |"
        )
    lines += ["", f"Samples per figure: {min(v.n for v in s.values())}."]
    return lines
