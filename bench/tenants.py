"""Identity measured from the outside: what a bearer token costs per call,
and whether one tenant flooding calls slows another.

Every daemon is a `toolrt serve` child (bench/ours.py) with its own instance
name, configuration and tokens file in a temporary directory; the caller
stops them and removes their containers by that name.
"""

from __future__ import annotations

import multiprocessing
import re
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from bench import ours
from bench.stats import Sample, interleave
from runtime.client import Client, ToolrtRpcError

FLOODERS = 8
# The flooding tenant's ceiling in the quota variant: well under what 8
# callers reach on a small host, so most of its calls are refused.
FLOOD_RATE = 20
RETRY_IN = re.compile(r"retry in ([0-9.]+) s")

# Short names used in the identity table.
NAMES = {
    "auth_none": "no auth configured",
    "auth_token": "`shell true` with a bearer token",
    "auth_audit": "`shell true` with a token and audit_log",
    "quiet_free": "bob alone",
    "flood_free": "bob beside alice's flood",
    "quiet_quota": "bob alone (alice has a quota)",
    "flood_quota": f"bob beside alice's flood at her quota ({FLOOD_RATE}/s)",
    "quiet_polite": "bob alone (alice has a quota, waits as told)",
    "flood_polite": "bob beside alice's flood at her quota, waiting as told",
}


def _daemon(
    instance: str, log_path: str, tmp: Path, name: str, toml: str, tenants: list[str]
) -> tuple[ours.Daemon, dict[str, str]]:
    """Daemon `name` of this run: `toml` plus one token per tenant (ours.configured)."""
    return ours.configured(f"{instance}-{name}", log_path, tmp, toml, tenants)


def auth_cost(
    instance: str, log_path: str, tmp: Path, rounds: int, daemons: list[ours.Daemon]
) -> dict[str, Sample]:
    """`shell true` on three daemons, in interleaved blocks: no authentication
    configured, a token per call, a token and the audit log."""
    plain, _ = _daemon(instance, log_path, tmp, "noauth", "", [])
    daemons.append(plain)
    token, _ = _daemon(instance, log_path, tmp, "token", "", ["alice"])
    daemons.append(token)
    audit = 'audit_log = "@TMP@/audit.jsonl"\n'
    audited, _ = _daemon(instance, log_path, tmp, "audit", audit, ["alice"])
    daemons.append(audited)
    s = {
        "auth_none": Sample("toolrt Execute shell true, no auth configured"),
        "auth_token": Sample("toolrt Execute shell true, bearer token"),
        "auth_audit": Sample("toolrt Execute shell true, bearer token + audit_log"),
    }
    sessions = [d.client.create_session().id for d in (plain, token, audited)]
    parts: list[tuple[Sample, int, Callable[[], Any]]] = [
        (sample, 40, _caller(d.client, sid))
        for sample, d, sid in zip(s.values(), (plain, token, audited), sessions, strict=True)
    ]
    interleave(rounds, parts)
    for d, sid in zip((plain, token, audited), sessions, strict=True):
        d.client.close_session(sid)
        d.stop()
    return s


def _caller(client: Client, session_id: str) -> Callable[[], Any]:
    return lambda: ours.shell(client, session_id, "true")


def _flood(target: str, token: str, polite: bool, on: Any, stop: Any, out: Any) -> None:
    """In a process of its own: FLOODERS threads, each in its own session,
    call `shell true` back to back while `on` is set; a refusal for the rate
    is ignored (a hostile or broken client) or, `polite`, waited out as the
    message says."""
    client = Client(target, token=token, timeout=120)
    ids = [client.create_session().id for _ in range(FLOODERS)]
    counts = {"ok": 0, "refused": 0, "failed": 0}
    lock = threading.Lock()

    def loop(session_id: str) -> None:
        while not stop.is_set():
            if not on.wait(0.1):
                continue
            try:
                result = client.call(session_id, "shell", {"command": "true"})
                key = "ok" if result.ok else "failed"
            except ToolrtRpcError as exc:
                key = "refused" if exc.code == grpc.StatusCode.RESOURCE_EXHAUSTED else "failed"
                wait = RETRY_IN.search(exc.details)
                if polite and wait:
                    time.sleep(float(wait.group(1)))
            with lock:
                counts[key] += 1

    threads = [threading.Thread(target=loop, args=(sid,)) for sid in ids]
    for t in threads:
        t.start()
    out.put("ready")
    for t in threads:
        t.join()
    for sid in ids:
        client.close_session(sid)
    client.close()
    out.put(counts)


class Flood:
    """A flooding tenant in a spawned process (its own GIL and gRPC), switched
    on and off between the neighbour's blocks of calls."""

    def __init__(self, d: ours.Daemon, token: str, polite: bool) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.on, self.stop, self.out = ctx.Event(), ctx.Event(), ctx.Queue()
        self.proc = ctx.Process(
            target=_flood, args=(d.target, token, polite, self.on, self.stop, self.out)
        )
        self.proc.start()
        if self.out.get(timeout=120) != "ready":
            msg = "the flooding process did not start"
            raise RuntimeError(msg)
        self.seconds = 0.0
        self._since = 0.0

    def start(self) -> None:
        self._since = time.monotonic()
        self.on.set()
        time.sleep(0.3)  # let the flood reach its pace before measuring

    def pause(self) -> None:
        self.seconds += time.monotonic() - self._since
        self.on.clear()

    def finish(self) -> dict[str, int]:
        self.on.clear()
        self.stop.set()
        counts: dict[str, int] = self.out.get(timeout=120)
        self.proc.join(30)
        return counts


def neighbour(
    instance: str, log_path: str, tmp: Path, rounds: int, daemons: list[ours.Daemon]
) -> dict[str, Sample]:
    """Tenant bob's `shell true` with and without tenant alice flooding, on a
    daemon without tenant tables and on two giving alice calls_per_second:
    one where alice ignores refusals, one where she waits as told."""
    quota = f"[tenants.alice]\ncalls_per_second = {FLOOD_RATE}\nburst = {FLOOD_RATE}\n"
    s: dict[str, Sample] = {}
    variants = []
    for key, toml, label, polite in (
        ("free", "", "no quota", False),
        ("quota", quota, f"alice at {FLOOD_RATE} calls/s", False),
        ("polite", quota, f"alice at {FLOOD_RATE} calls/s, waiting as told", True),
    ):
        d, tokens = _daemon(instance, log_path, tmp, f"nb-{key}", toml, ["bob", "alice"])
        daemons.append(d)
        s[f"quiet_{key}"] = Sample(f"bob shell true, alice idle ({label})")
        s[f"flood_{key}"] = Sample(f"bob shell true, alice flooding ({label})")
        variants.append((key, d, Flood(d, tokens["alice"], polite), d.client.create_session().id))
    for _ in range(rounds):
        for key, d, flood, sid in variants:
            for sample, flooding in ((s[f"quiet_{key}"], False), (s[f"flood_{key}"], True)):
                if flooding:
                    flood.start()
                interleave(1, [(sample, 30, _caller(d.client, sid))])
                if flooding:
                    flood.pause()
    for key, d, flood, sid in variants:
        counts = flood.finish()
        rate = f"{FLOODERS} callers" + ("" if key == "free" else f", quota {FLOOD_RATE}/s")
        rate += ", waiting as told" if key == "polite" else ""
        # Each start finds a full bucket, so a quota lets through its burst
        # once per block on top of its rate.
        tput = Sample(f"alice's flood ({rate}): calls that ran, per second flooding")
        tput.calls_per_s = counts["ok"] / flood.seconds if flood.seconds else 0.0
        tput.failures = counts["failed"]
        if counts["refused"]:
            tput.note = f"{counts['refused'] / flood.seconds:.0f} refused/s"
        s[f"tput_{key}"] = tput
        d.client.close_session(sid)
        d.stop()
    return s


def measure(
    instance: str, log_path: str, quick: bool, daemons: list[ours.Daemon]
) -> dict[str, Sample]:
    """Both measurements; every daemon started is appended to `daemons`
    (the caller stops them and removes their containers)."""
    with tempfile.TemporaryDirectory(prefix="toolrt-bench-") as tmp:
        s = auth_cost(instance, log_path, Path(tmp), 3 if quick else 10, daemons)
        s.update(neighbour(instance, log_path, Path(tmp), 3 if quick else 8, daemons))
    return s
