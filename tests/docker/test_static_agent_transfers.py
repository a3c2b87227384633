"""The Python agent's checks of archives into the sandbox (uploads, safe
extraction, restores, a decompression bomb), run unchanged on the static
agent (`agent = "static"`), each with the arguments its own module gives it."""

from __future__ import annotations

import bz2
import gzip
import inspect
import lzma
from pathlib import Path
from typing import Any

import pytest

from runtime.client import Client
from tests.docker import test_agent_stalls as stalls
from tests.docker import test_file_holes as file_holes
from tests.docker import test_snapshots as snapshots
from tests.docker import test_transfer_streams as streams
from tests.docker import test_workspace_transfer as transfer
from tests.helpers import cases_of, make_tar, run_check

pytestmark = [pytest.mark.docker, pytest.mark.static_agent]

CHECKS = [
    stalls.test_a_decompression_bomb_is_refused_early_and_the_session_keeps_answering,
    file_holes.test_extraction_resolves_links_against_the_real_tree,
    snapshots.test_a_restored_session_runs_no_process_it_had_before,
    snapshots.test_restore_after_rm_brings_back_files_cwd_and_env,
    snapshots.test_restore_stops_background_processes_and_includes_tmp_when_asked,
    streams.test_a_large_upload_streams_through_with_flat_memory,
    streams.test_a_streamed_upload_that_breaks_midway_changes_nothing,
    transfer.test_an_archive_larger_than_the_workspace_is_refused,
    transfer.test_archive_escapes_are_refused_and_nothing_is_extracted,
    transfer.test_create_session_seeds_the_workspace,
    transfer.test_create_session_with_a_bad_archive_is_refused_and_leaves_nothing,
    transfer.test_not_a_tar_archive,
    transfer.test_upload_into_a_directory_and_download_it_back,
    transfer.test_writing_through_an_archive_link_is_refused,
]
CASES = [(check, case) for check in CHECKS for case in cases_of(check)]


@pytest.mark.parametrize(
    ("check", "case"),
    CASES,
    ids=[f"{check.__name__[5:]}-{n}" for n, (check, _) in enumerate(CASES)],
)
def test_static_agent_passes_the_python_agents_transfer_checks(
    make_daemon: Any, docker_client: Any, tmp_path: Path, check: Any, case: dict[str, Any]
) -> None:
    daemon = make_daemon(agent="static", state_dir=str(tmp_path / "state"))
    with Client(daemon.target) as client:
        given = {"client": client, "snap_client": client, "docker_client": docker_client}
        if "session" not in inspect.signature(check).parameters:
            run_check(check, daemon=daemon, **given, **case)
            return
        with client.session() as session:
            run_check(check, daemon=daemon, session=session, **given, **case)


def test_gzip_bzip2_and_xz_archives_are_unpacked(make_daemon: Any) -> None:
    plain = make_tar(("d/a.txt", "file", "packed\n"))
    daemon = make_daemon(agent="static")
    with Client(daemon.target) as client, client.session() as session:
        for name, compress in (("gz", gzip.compress), ("bz2", bz2.compress), ("xz", lzma.compress)):
            session.upload(compress(plain), f"/workspace/{name}")
            read = session.call("read_file", {"path": f"/workspace/{name}/d/a.txt"})
            assert read.ok and read.output["content"] == "packed\n", (name, read)
