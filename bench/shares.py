"""Another tenant's `shell true` beside each attempt to exhaust a share, as ratios to alone.

Each attempt runs on a daemon of its own (bench/ours.py: tenants bob and alice
with tokens, an audit log, durable state; network egress offered where the
attempt needs a proxy). Tenant bob's sequential `shell true` is measured
alone, then while tenant alice, in a spawned process of her own, exhausts one
resource: the state disk, the audit log, the transfer slots, proxy
connections, large arguments, `workspace_diff`. Every attempt is bounded in
count and in time and stops by itself (its sandbox loops end after their
seconds, under `timeout` too); then alice closes what she opened, and the
daemon is stopped.

Reported, not judged: a ratio near 1 and no failed call of bob's is the aim,
and alice runs on the same few CPUs as bob and the daemon. The caller removes
the daemons' containers by instance.

    make bench BENCH_ARGS='--only shares [--quick]'     (and in every make bench)
"""

from __future__ import annotations

import multiprocessing
import queue
import tarfile
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from io import BytesIO
from pathlib import Path
from typing import Any

import psutil

from bench import ours
from bench.stats import Sample
from runtime._proto.toolruntime.v1 import runtime_pb2 as pb
from runtime.client import Client, ToolrtRpcError

MiB = 1 << 20
# Longest alice may take to prepare (fill a workspace, open sessions).
PREPARE_S = 300
# Patterns sessions may ask for; .test names are never resolved, as no call
# names an allowed one: the proxy refuses the others without a lookup.
NETWORK = '[network]\nallow_max = ["*.test:*"]\n'
NETWORK_ASK = {"network": pb.NetworkPolicy(allow=["web.test"])}
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


@dataclass
class Plan:
    """How long and how many: every loop below stops at whichever comes first."""

    seconds: float
    bob_calls: int  # bob's calls alone, and at most beside the attempt
    snapshots: int  # state disk: snapshots of a fresh blob each
    blob_mib: int
    uploads: int  # transfers: streams opened and stalled
    large_calls: int  # large arguments: calls per caller
    diff_files: int  # workspace_diff: 200 KiB text files in the workspace
    diff_batches: int

    @classmethod
    def of(cls, quick: bool) -> Plan:
        if quick:
            return cls(8, 40, 6, 4, 20, 4, 150, 6)
        return cls(20, 150, 16, 4, 20, 20, 600, 30)


# -- alice's side, in a process of her own ----------------------------------------
class Attempt:
    """One way for alice to exhaust a resource: `prepare` (not measured), then
    `run` until `deadline` (monotonic), then `cleanup`. Counts go in `seen`."""

    label = ""
    toml = ""

    def __init__(self, client: Client, plan: Plan) -> None:
        self.client, self.plan = client, plan
        self.sessions: list[str] = []
        self.seen: Counter[str] = Counter()

    def session(self, **fields: Any) -> str:
        self.sessions.append(self.client.create_session(**fields).id)
        return self.sessions[-1]

    def shell(self, session_id: str, command: str, **arguments: Any) -> None:
        result = self.client.call(session_id, "shell", {"command": command, **arguments})
        if not result.ok:
            msg = f"{command[:60]!r}: {result.error_code} {result.error_message}"
            raise RuntimeError(msg)

    def count(self, fn: Callable[[], Any]) -> None:
        """Run one attempt; count its outcome by gRPC code (ok, or the refusal)."""
        try:
            fn()
            self.seen["ok"] += 1
        except ToolrtRpcError as exc:
            self.seen[exc.code.name] += 1

    def prepare(self) -> None:
        pass

    def run(self, deadline: float) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        for session_id in self.sessions:
            try:
                self.client.close_session(session_id)
            except ToolrtRpcError:
                pass  # already closed by the daemon (a lost sandbox): nothing to free


def together(fns: Iterable[Callable[[], Any]]) -> None:
    """Run each of `fns` on a thread of its own; return when all have."""
    threads = [threading.Thread(target=fn) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


class StateDisk(Attempt):
    label = "state disk: snapshots of a workspace holding a name that is not UTF-8"
    toml = "[tenants.alice]\nsnapshot_max_bytes = 8388608\n"

    def prepare(self) -> None:
        self.target = self.session()
        self.shell(self.target, "touch \"/workspace/$(printf 'n\\xff')\"")
        self.snapshots: list[str] = []

    def run(self, deadline: float) -> None:
        for i in range(self.plan.snapshots):
            if time.monotonic() > deadline:
                break
            # A fresh blob each time: deduplication keeps nothing from the last.
            self.shell(
                self.target,
                f"rm -f /workspace/blob-*; head -c {self.plan.blob_mib}M /dev/urandom"
                f" > /workspace/blob-{i}",
            )
            self.count(lambda: self.snapshots.append(self.client.snapshot(self.target).id))

    def cleanup(self) -> None:
        try:
            for snapshot_id in self.snapshots:
                self.client.delete_snapshot(snapshot_id)
        finally:
            super().cleanup()


class Audit(Attempt):
    label = "audit log: 3 sandboxes looping connects the proxy refuses"
    toml = NETWORK
    loop = REFUSED_LOOP

    def prepare(self) -> None:
        for _ in range(3):
            session_id = self.session(**NETWORK_ASK)
            written = self.client.call(
                session_id, "write_file", {"path": "loop.py", "content": self.loop}
            )
            if not written.ok:
                raise RuntimeError(written.error_message)

    def run(self, deadline: float) -> None:
        seconds = max(1, round(deadline - time.monotonic()))
        command = f"timeout {seconds + 5} python3 loop.py {seconds}"
        for session_id in self.sessions:
            self.count(partial(self.shell, session_id, command, background=True))
        time.sleep(max(0.0, deadline - time.monotonic()))


class ProxyConnections(Audit):
    label = "proxy connections: 3 sandboxes opening and holding every one they can"
    loop = HOLD_LOOP


class Transfers(Attempt):
    label = "transfer slots: uploads that send one chunk and stall"

    def prepare(self) -> None:
        for _ in range(4):
            self.session()
        # The header of a 1 MiB file and a few of its bytes: the unpacking
        # waits for the rest, so the stream holds whatever it was given.
        self.chunk = tarfile.TarInfo("stalled.bin")
        self.chunk.size = MiB

    def run(self, deadline: float) -> None:
        def stalled(session_id: str) -> Iterator[pb.UploadFilesRequest]:
            yield pb.UploadFilesRequest(session_id=session_id, tar=self.chunk.tobuf() + b"x" * 64)
            time.sleep(max(0.0, deadline - time.monotonic()))

        def upload(session_id: str) -> None:
            streams = stalled(session_id)
            self.client._rpc(self.client.stub.UploadFiles, streams, self.plan.seconds + 30)

        sessions = self.sessions
        together(
            partial(self.count, partial(upload, sessions[i % len(sessions)]))
            for i in range(self.plan.uploads)
        )


class LargeArguments(Attempt):
    label = "large arguments: 8 callers sending ~15 MB, 99,000-item arguments"

    def prepare(self) -> None:
        self.target = self.session()
        item = '"' + "x" * 150 + '"'
        self.arguments = '{"command": "true", "pad": [' + ",".join([item] * 99_000) + "]}"

    def run(self, deadline: float) -> None:
        def caller() -> None:
            for _ in range(self.plan.large_calls):
                if time.monotonic() > deadline:
                    return
                self.count(lambda: self.client.call(self.target, "shell", self.arguments))

        together(caller for _ in range(8))


class WorkspaceDiff(Attempt):
    label = "workspace_diff: batches of 6 over a workspace of 200 KiB text files"

    def prepare(self) -> None:
        self.target = self.session()
        files = self.plan.diff_files
        self.shell(
            self.target,
            "python3 -c 'import os, base64\n"
            f"for i in range({files}):\n"
            '    open(f"/workspace/f{i}.txt", "wb").write('
            "base64.encodebytes(os.urandom(150000)))'",
            timeout_s=120,
        )

    def run(self, deadline: float) -> None:
        for _ in range(self.plan.diff_batches):
            if time.monotonic() > deadline:
                break
            calls = [
                pb.ToolCall(id=uuid.uuid4().hex, name="workspace_diff", arguments_json="{}")
                for _ in range(6)
            ]
            request = pb.ExecuteBatchRequest(session_id=self.target, calls=calls)
            self.count(lambda r=request: self.client._rpc(self.client.stub.ExecuteBatch, r, 120))


ATTEMPTS: dict[str, type[Attempt]] = {
    "state_disk": StateDisk,
    "audit": Audit,
    "transfers": Transfers,
    "proxy": ProxyConnections,
    "large_args": LargeArguments,
    "workspace_diff": WorkspaceDiff,
}


def _alice(name: str, target: str, token: str, plan: Plan, go: Any, out: Any) -> None:
    """In a spawned process: prepare, say so, wait for `go`, attack, clean up,
    and report what alice's attempts got (or why it failed)."""
    client = Client(target, token=token, timeout=120)
    attempt = ATTEMPTS[name](client, plan)
    try:
        attempt.prepare()
        out.put("ready")
        go.wait(300)
        attempt.run(time.monotonic() + plan.seconds)
        out.put(dict(attempt.seen))
    except Exception as exc:  # noqa: BLE001 - the report says it; the run goes on
        out.put(f"{type(exc).__name__}: {str(exc)[:200]}")
    finally:
        try:
            attempt.cleanup()
        finally:
            client.close()
            out.put("done")


# -- bob's side, and the daemon's gauges ---------------------------------------------
@dataclass
class Outcome:
    alone: Sample
    beside: Sample
    alice: dict[str, int] | str = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    transfers: Sample | None = None


def _bob_calls(
    client: Client, session_id: str, name: str, n: int, until: Callable[[], bool]
) -> Sample:
    """Up to `n` sequential `shell true`, stopping early once `until()`; a refused
    or failed call is counted, not timed."""
    sample = Sample(name)
    for _ in range(n):
        if until():
            break
        started = time.perf_counter()
        try:
            result = client.call(session_id, "shell", {"command": "true"}, timeout=30)
            ok, why = result.ok, result.error_code
        except ToolrtRpcError as exc:
            ok, why = False, exc.code.name
        if ok:
            sample.times.append(time.perf_counter() - started)
        else:
            sample.failures += 1
            sample.note = sample.note or why
    return sample


def _bob_transfers(d: ours.Daemon, token: str, until: Callable[[], bool]) -> Sample:
    """Bob uploads and downloads a few bytes, over and over, while `until()` is false."""
    data = b"a few bytes\n"
    archive = BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo("bob.txt")
        info.size = len(data)
        tar.addfile(info, BytesIO(data))
    sample = Sample("bob UploadFiles + DownloadFiles of a few bytes, beside alice (transfers)")
    with Client(d.target, token=token, timeout=10) as client, client.session() as session:
        while not until():
            started = time.perf_counter()
            try:
                session.upload(archive.getvalue())
                session.download(["/workspace/bob.txt"])
                sample.times.append(time.perf_counter() - started)
            except ToolrtRpcError as exc:
                sample.failures += 1
                sample.note = sample.note or exc.code.name
    return sample


def _dir_bytes(path: str) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


class Gauges:
    """The daemon's peak memory and open descriptors while alice attacks."""

    def __init__(self, d: ours.Daemon) -> None:
        self.process = psutil.Process(d.proc.pid)
        self.peak = {"daemon_rss_mib": 0.0, "daemon_fds": 0.0}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stop.wait(0.2):
            try:
                rss = self.process.memory_info().rss / MiB
                fds = self.process.num_fds()
            except psutil.Error:
                return
            self.peak["daemon_rss_mib"] = max(self.peak["daemon_rss_mib"], rss)
            self.peak["daemon_fds"] = max(self.peak["daemon_fds"], fds)

    def finish(self) -> dict[str, float]:
        self.stop.set()
        self.thread.join(5)
        return self.peak


def attempt_once(
    name: str, instance: str, log_path: str, tmp: Path, plan: Plan, daemons: list[ours.Daemon]
) -> Outcome:
    """One attempt on a daemon of its own: bob alone, then bob beside alice."""
    kind = ATTEMPTS[name]
    audit = f'audit_log = "@TMP@/{instance}-{name}.audit.jsonl"\n'
    d, tokens = ours.configured(
        f"{instance}-ex-{name}", log_path, tmp, audit + kind.toml, ["bob", "alice"]
    )
    daemons.append(d)
    before = {
        "daemon_rss_mib": d.rss() / MiB,
        "daemon_fds": float(psutil.Process(d.proc.pid).num_fds()),
    }
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    alice = ctx.Process(target=_alice, args=(name, d.target, tokens["alice"], plan, go, out))
    with d.client.session() as bob:
        never: Callable[[], bool] = lambda: False  # noqa: E731
        _bob_calls(d.client, bob.id, "warm-up", 10, never)
        alone = _bob_calls(d.client, bob.id, "bob shell true, alone", plan.bob_calls, never)
        alice.start()
        first = _next(out, alice, PREPARE_S)
        go.set()
        if first == "ready":
            outcome = _beside(name, d, tokens["bob"], bob.id, plan, alone)
            outcome.alice = _collect(out, alice, plan)
        else:
            _collect(out, alice, plan)  # her process ends, or is killed
            why = first or f"alice was not ready within {PREPARE_S} s"
            outcome = Outcome(alone, Sample("bob shell true, beside alice"), alice=str(why))
    for key, was in before.items():
        outcome.gauges[key.replace("daemon_", "daemon_before_")] = was
    audit_path = tmp / f"{instance}-{name}.audit.jsonl"
    if audit_path.exists():
        outcome.gauges["audit_log_mib"] = audit_path.stat().st_size / MiB
        with audit_path.open("rb") as lines:
            outcome.gauges["audit_log_lines"] = float(sum(1 for _ in lines))
    outcome.gauges["state_dir_mib_after_cleanup"] = _dir_bytes(d.state_dir) / MiB
    d.stop()
    return outcome


def _beside(
    name: str, d: ours.Daemon, token: str, session_id: str, plan: Plan, alone: Sample
) -> Outcome:
    """Bob's calls (and, beside stalled transfers, his own transfers) while alice attacks."""
    gauges = Gauges(d)
    ends = time.monotonic() + plan.seconds
    over: Callable[[], bool] = lambda: time.monotonic() > ends  # noqa: E731
    probe: list[Sample] = []
    prober = threading.Thread(target=lambda: probe.append(_bob_transfers(d, token, over)))
    if name == "transfers":
        prober.start()
    beside = _bob_calls(d.client, session_id, "bob shell true, beside alice", 100_000, over)
    outcome = Outcome(alone, beside, gauges=gauges.finish())
    if prober.is_alive() or probe:
        prober.join(60)
        outcome.transfers = probe[0] if probe else None
    return outcome


def _next(out: Any, alice: Any, seconds: float) -> Any:
    """Alice's next message; None once her process ended without one, or after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            return out.get(timeout=1)
        except queue.Empty:
            if not alice.is_alive():
                try:
                    return out.get_nowait()
                except queue.Empty:
                    return None
    return None


def _collect(out: Any, alice: Any, plan: Plan) -> dict[str, int] | str:
    """Alice's report once she has cleaned up; a hung attacker is killed (its pid)."""
    seen: dict[str, int] | str = "no report"
    deadline = time.monotonic() + plan.seconds + 180
    while (message := _next(out, alice, deadline - time.monotonic())) not in (None, "done"):
        seen = message
    alice.join(10)
    if alice.is_alive():
        alice.kill()
        alice.join()
        seen = f"{seen} (killed: it did not stop by itself)"
    return seen


def measure(
    instance: str, log_path: str, quick: bool, daemons: list[ours.Daemon]
) -> dict[str, Outcome]:
    """Every attempt in turn; each daemon started is appended to `daemons`."""
    plan = Plan.of(quick)
    with tempfile.TemporaryDirectory(prefix="toolrt-bench-") as tmp:
        return {
            name: attempt_once(name, instance, log_path, Path(tmp), plan, daemons)
            for name in ATTEMPTS
        }


# -- the report ----------------------------------------------------------------------
START = "<!-- bench:shares:start -->"
END = "<!-- bench:shares:end -->"


def _ms(x: float) -> str:
    return "-" if x != x else f"{x * 1e3:.1f}"


def _times(a: float, b: float) -> str:
    return "-" if not a or a != a or b != b else f"{b / a:.2f}"


def _alice_line(seen: dict[str, int] | str) -> str:
    if isinstance(seen, str):
        return seen.replace("|", "/")
    return ", ".join(f"{code} {n}" for code, n in sorted(seen.items())) or "-"


GAUGES = {
    "state_disk": (
        "state_dir_mib_after_cleanup",
        "state_dir {:.1f} MiB after alice deleted her snapshots",
    ),
    "audit": ("audit_log_lines", "audit log {:.0f} lines"),
    "proxy": ("daemon_fds", "daemon fds peak {:.0f}"),
    "workspace_diff": ("daemon_rss_mib", "daemon RSS peak {:.0f} MiB"),
    "large_args": ("daemon_rss_mib", "daemon RSS peak {:.0f} MiB"),
}


def section(found: dict[str, Outcome], measured: str) -> list[str]:
    lines = [
        "### Shares: another tenant beside each exhaustion attempt",
        "",
        measured,
        "",
        "Each attempt on a daemon of its own (two tenants with tokens, an audit log, "
        "durable state): tenant bob's sequential `shell true` alone, then while tenant "
        "alice, in a process of her own, exhausts one shared resource for a bounded "
        "time and count (`bench/shares.py`). Ratios are beside / alone; a failed "
        "call of bob's is counted, not timed. Reported, not judged: alice runs on the "
        "same CPUs as bob and the daemon.",
        "",
        "| alice's attempt | bob p50 ms alone | beside | x | bob p99 ms alone | beside | x "
        "| bob's calls failed | alice's attempts by code | also measured |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for name, o in found.items():
        gauge = ""
        if name in GAUGES and GAUGES[name][0] in o.gauges:
            key, text = GAUGES[name]
            gauge = text.format(o.gauges[key])
        if o.transfers is not None:
            t = o.transfers
            gauge = (
                f"bob's upload + download p50 {_ms(t.p50)} ms, p99 {_ms(t.p99)} ms, "
                f"{t.failures} failed" + (f" ({t.note})" if t.note else "")
            )
        failed = f"{o.beside.failures}" + (f" ({o.beside.note})" if o.beside.note else "")
        lines.append(
            f"| {ATTEMPTS[name].label} | {_ms(o.alone.p50)} | {_ms(o.beside.p50)} | "
            f"{_times(o.alone.p50, o.beside.p50)} | {_ms(o.alone.p99)} | {_ms(o.beside.p99)} | "
            f"{_times(o.alone.p99, o.beside.p99)} | {failed} | {_alice_line(o.alice)} | {gauge} |"
        )
    n = [o.beside.n for o in found.values()]
    if n:
        lines += [
            "",
            f"Bob's calls per figure: {found[next(iter(found))].alone.n} alone, "
            f"{min(n)}–{max(n)} beside.",
        ]
    return lines


def as_json(found: dict[str, Outcome]) -> dict[str, Any]:
    return {
        name: {
            "alone": o.alone.as_dict(),
            "beside": o.beside.as_dict(),
            "alice": o.alice,
            "gauges": o.gauges,
            "transfers": o.transfers.as_dict() if o.transfers else None,
        }
        for name, o in found.items()
    }
