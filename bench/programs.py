"""The programs' RPCs beside what a harness would use without them, in one run.

On one daemon, one session:

- `Exec` of `["true"]` (argv, no shell) beside Execute `shell true`, in
  interleaved blocks;
- 100 MiB of random bytes through WriteFile and ReadFile beside
  UploadFiles and DownloadFiles of the same file (tar packing and
  unpacking included, as a client has to) and the Docker SDK's
  put_archive and get_archive (the same) on a plain container of the same
  image (baselines.py), one of each per round, rounds interleaved.

Every transfer's size is checked, so a quick failure never passes for a figure.
"""

from __future__ import annotations

import functools
import io
import os
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from bench import report
from bench.baselines import Baselines, get_one, tar_of
from bench.ours import Daemon, featured, shell
from bench.stats import Sample, interleave

MiB = 1 << 20
BIG = 100 * MiB
NAME = "big.bin"

START = "<!-- bench:programs:start -->"
END = "<!-- bench:programs:end -->"

NAMES = {
    "prog_exec": "Exec true",
    "prog_shell": "Execute shell true",
    "write_big": "WriteFile 100 MiB",
    "upload_big": "UploadFiles 100 MiB",
    "put_big": "put_archive 100 MiB",
    "read_big": "ReadFile 100 MiB",
    "download_big": "DownloadFiles 100 MiB",
    "get_big": "get_archive 100 MiB",
}
# Reported, not judged: each program RPC's p50 over its baseline's.
PAIRS = (
    ("prog_exec", "prog_shell"),
    ("write_big", "upload_big"),
    ("write_big", "put_big"),
    ("read_big", "download_big"),
    ("read_big", "get_big"),
)
LABELS = {
    "prog_exec": "toolrt Exec true",
    "prog_shell": "toolrt Execute shell true (beside Exec)",
    "write_big": "toolrt WriteFile 100 MiB",
    "upload_big": "toolrt UploadFiles 100 MiB (+ tar packing)",
    "put_big": "SDK put_archive 100 MiB (+ tar packing)",
    "read_big": "toolrt ReadFile 100 MiB",
    "download_big": "toolrt DownloadFiles 100 MiB (+ tar unpacking)",
    "get_big": "SDK get_archive 100 MiB (+ tar unpacking)",
}


def must(ok: bool, failed: str) -> None:
    if not ok:
        raise RuntimeError(failed)


def sized(got: int, what: str) -> None:
    must(got == BIG, f"{what} moved {got} bytes, not {BIG}")


def untarred(archive: bytes) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        member = tar.extractfile(NAME)
        assert member is not None
        return member.read()


def measure(d: Daemon, base: Baselines, quick: bool) -> dict[str, Sample]:
    s = {key: Sample(label) for key, label in LABELS.items()}
    data = os.urandom(BIG)
    with d.client.session() as session, base.archive_container() as container:

        def exec_true() -> None:
            must(session.exec(["true"]).exit_code == 0, "Exec true failed")

        interleave(
            3 if quick else 10,
            [
                (s["prog_exec"], 20, exec_true),
                (s["prog_shell"], 20, functools.partial(shell, d.client, session.id, "true")),
            ],
        )

        def upload() -> None:
            files, _ = session.upload(tar_of(NAME, data))
            must(files == 1, f"UploadFiles unpacked {files} files")

        def put() -> None:
            must(container.put_archive("/tmp", tar_of(NAME, data)), "put_archive failed")

        def read(fetch: Any, what: str) -> None:
            sized(len(fetch()), what)

        interleave(
            2 if quick else 6,
            [
                (
                    s["write_big"],
                    1,
                    lambda: sized(session.write_file_bytes(NAME, data), "WriteFile"),
                ),
                (s["upload_big"], 1, upload),
                (s["put_big"], 1, put),
                (s["read_big"], 1, lambda: read(lambda: session.read_file_bytes(NAME), "ReadFile")),
                (
                    s["download_big"],
                    1,
                    lambda: read(
                        lambda: untarred(session.download([f"/workspace/{NAME}"])), "DownloadFiles"
                    ),
                ),
                (s["get_big"], 1, lambda: read(lambda: get_one(container, f"/tmp/{NAME}"), "get")),
            ],
        )
    for key in ("write_big", "upload_big", "put_big", "read_big", "download_big", "get_big"):
        if s[key].n:
            s[key].note = f"{BIG / MiB / s[key].p50:.0f} MiB/s at p50"
    return s


def section(s: dict[str, Sample], measured: str) -> list[str]:
    """Markdown of the programs' figures: the ratios, then every sample."""
    return [
        "### Programs: Exec and 100 MiB files beside their baselines",
        "",
        measured,
        "",
        "One session: `Exec` of `true` (argv, no shell) in blocks alternating with "
        "Execute `shell true`; then rounds of 100 MiB of random bytes written and read "
        "back by WriteFile/ReadFile, UploadFiles/DownloadFiles of a tar of the one file "
        "(packing and unpacking timed, as a client must), and the Docker SDK's "
        "put_archive/get_archive on a plain container of the same image with a writable "
        "root (the same tar work). Reported, not judged: toolrt / baseline, p50.",
        "",
        *report.target_table(report.reported(s, PAIRS), NAMES),
        "",
        *report.latency_table(s),
    ]


def alone(instance: str, log_path: str, quick: bool, daemons: list[Daemon]) -> dict[str, Sample]:
    """`measure` on a featured daemon of its own (`--only programs`)."""
    base = Baselines(instance, quick)
    try:
        with tempfile.TemporaryDirectory(prefix="toolrt-bench-") as tmp:
            d = featured(f"{instance}-prog", log_path, Path(tmp))
            daemons.append(d)
            s = measure(d, base, quick)
            d.stop()
    finally:
        base.cleanup()
        base.close()
    return s
