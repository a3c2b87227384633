"""Snapshots, forks and restores against what a user would otherwise script.

For a 1 MiB and a 100 MiB workspace (random bytes, so nothing compresses
or deduplicates within it), in interleaved rounds on one daemon:

- SnapshotSession beside DownloadFiles of /workspace (a client-side copy),
  the first time (every file new to the store) and again unchanged;
- ForkSession count 1 and 8 beside DownloadFiles + CreateSession{workspace_tar}
  (8 creates in parallel threads for count 8); for 100 MiB the archive is
  over a gRPC message's 64 MiB, so the baseline creates and then UploadFiles;
- RestoreSession beside `rm -rf /workspace/*` + UploadFiles of the archive.

Forked and baseline sessions are closed after each round, untimed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench import ours
from bench.stats import Sample
from runtime.client import Client
from runtime.config import Config

MiB = 1 << 20
SIZES = {"1M": (64, 16 << 10), "100M": (100, MiB)}
# Largest archive CreateSession{workspace_tar} carries in one message.
INLINE_MAX = 48 * MiB
LIMITS = {"workspace_bytes": 256 * MiB, "memory_bytes": 512 * MiB}

START = "<!-- bench:snapshots:start -->"
END = "<!-- bench:snapshots:end -->"

NAMES = {
    "snap": "SnapshotSession",
    "snap_base": "DownloadFiles /workspace",
    "snap_again": "SnapshotSession again, nothing changed",
    "fork1": "ForkSession count 1",
    "fork1_base": "DownloadFiles + CreateSession{workspace_tar}",
    "fork8": "ForkSession count 8",
    "fork8_base": "DownloadFiles + 8 x CreateSession{workspace_tar} (parallel)",
    "restore": "RestoreSession",
    "restore_base": "rm -rf /workspace/* + UploadFiles",
}


def _seconds(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def _copy(client: Client, tar: bytes, count: int) -> list[str]:
    """The baseline's new sessions holding `tar` (inline when it fits a message)."""

    def one(_: int) -> str:
        if len(tar) <= INLINE_MAX:
            return str(client.create_session(workspace_tar=tar, limits=LIMITS).id)
        session_id = str(client.create_session(limits=LIMITS).id)
        client.upload(session_id, tar, "/workspace")
        return session_id

    # A client copying by hand runs as many at once as its tenant's share of
    # transfer slots lets it (more are refused: RESOURCE_EXHAUSTED).
    with ThreadPoolExecutor(min(count, Config().shares.transfers_per_tenant)) as pool:
        return list(pool.map(one, range(count)))


def _round(client: Client, session_id: str, key: str, s: dict[str, Sample]) -> None:
    def download() -> bytes:
        return client.download(session_id, ["/workspace"])

    t, snap = _seconds(lambda: client.snapshot(session_id))
    s[f"snap_{key}"].times.append(t)
    # The same files again: every blob is stored already.
    t, again = _seconds(lambda: client.snapshot(session_id))
    s[f"snap_again_{key}"].times.append(t)
    client.delete_snapshot(again.id)
    t, tar = _seconds(download)
    s[f"snap_base_{key}"].times.append(t)
    for count, name in ((1, "fork1"), (8, "fork8")):
        t, forks = _seconds(lambda c=count: client.fork(session_id, c))
        s[f"{name}_{key}"].times.append(t)
        for fork in forks:
            fork.close()
        t, ids = _seconds(lambda c=count: _copy(client, _strip(download()), c))
        s[f"{name}_base_{key}"].times.append(t)
        for made in ids:
            client.close_session(made)
    t, _ = _seconds(lambda: client.restore(session_id, snap.id))
    s[f"restore_{key}"].times.append(t)

    def rollback() -> None:
        client.call(session_id, "shell", {"command": "rm -rf /workspace/*"})
        client.upload(session_id, _strip(tar), "/workspace")

    t, _ = _seconds(rollback)
    s[f"restore_base_{key}"].times.append(t)
    client.delete_snapshot(snap.id)


def _strip(tar: bytes) -> bytes:
    """DownloadFiles names the top `workspace/`; an upload to /workspace wants
    the entries below it (rewritten with tarfile, as a user's script would)."""
    import io
    import tarfile

    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(tar)) as src,
        tarfile.open(fileobj=out, mode="w") as dst,
    ):
        for member in src:
            if member.name == "workspace":
                continue
            member.name = member.name.removeprefix("workspace/")
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    return out.getvalue()


def measure(
    instance: str, log_path: str, quick: bool, daemons: list[ours.Daemon]
) -> dict[str, Sample]:
    """Every figure above; the daemon started is appended to `daemons`."""
    s: dict[str, Sample] = {}
    d = ours.Daemon(f"{instance}-snap", 0, log_path)
    daemons.append(d)
    for key, (files, size) in SIZES.items():
        for name, label in NAMES.items():
            s[f"{name}_{key}"] = Sample(f"{label}, {key} workspace")
        session_id = d.client.create_session(limits=LIMITS).id
        command = f"for i in $(seq {files}); do head -c {size} /dev/urandom > f$i.bin; done"
        d.client.call(session_id, "shell", {"command": command})
        rounds = (2 if quick else 5) if key == "100M" else (3 if quick else 10)
        _round(d.client, session_id, key, {k: Sample(k) for k in s})  # warm-up, unrecorded
        for _ in range(rounds):
            _round(d.client, session_id, key, s)
        d.client.close_session(session_id)
    d.stop()
    return s


def section(s: dict[str, Sample], measured: str) -> list[str]:
    """Markdown: each operation beside its baseline, p50 and the ratio."""
    lines = [
        "### Snapshots, forks and restores",
        "",
        measured,
        "",
        "| workspace | toolrt | p50 | baseline a user would script | p50 | toolrt / baseline |",
        "|---|---|---:|---|---:|---:|",
    ]
    for key in SIZES:
        for name in ("snap", "snap_again", "fork1", "fork8", "restore"):
            # A repeated snapshot stands beside the same copy as the first.
            base_name = "snap_base" if name == "snap_again" else f"{name}_base"
            ours_s, base = s[f"{name}_{key}"], s[f"{base_name}_{key}"]
            lines.append(
                f"| {key} | {NAMES[name]} | {ours_s.p50 * 1e3:.0f} ms "
                f"| {NAMES[base_name]} | {base.p50 * 1e3:.0f} ms "
                f"| {ours_s.p50 / base.p50:.2f} |"
            )
    n = {k: v.n for k, v in s.items()}
    lines += ["", f"Samples per figure: {min(n.values())}–{max(n.values())}."]
    return lines
