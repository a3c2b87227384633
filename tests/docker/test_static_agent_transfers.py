"""The Python agent's checks of archives into the sandbox (uploads, safe
extraction, restores), run unchanged on the static agent (`agent = "static"`):
the `daemon` and `snap_client` they use are the static agent's here."""

from __future__ import annotations

import lzma
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.client import Client

# Collected here again, with this module's fixtures.
from tests.docker.test_agent_stalls import (  # noqa: F401
    test_a_decompression_bomb_is_refused_early_and_the_session_keeps_answering,
)
from tests.docker.test_file_holes import (  # noqa: F401
    test_extraction_resolves_links_against_the_real_tree,
)
from tests.docker.test_snapshots import (  # noqa: F401
    test_a_restored_session_runs_no_process_it_had_before,
    test_restore_after_rm_brings_back_files_cwd_and_env,
    test_restore_stops_background_processes_and_includes_tmp_when_asked,
)
from tests.docker.test_transfer_streams import (  # noqa: F401
    test_a_large_upload_streams_through_with_flat_memory,
    test_a_streamed_upload_that_breaks_midway_changes_nothing,
)
from tests.docker.test_workspace_transfer import (  # noqa: F401
    test_an_archive_larger_than_the_workspace_is_refused,
    test_archive_escapes_are_refused_and_nothing_is_extracted,
    test_create_session_seeds_the_workspace,
    test_create_session_with_a_bad_archive_is_refused_and_leaves_nothing,
    test_not_a_tar_archive,
    test_upload_into_a_directory_and_download_it_back,
    test_writing_through_an_archive_link_is_refused,
)
from tests.helpers import make_tar

pytestmark = pytest.mark.docker


@pytest.fixture
def daemon(make_daemon: Any) -> Any:
    return make_daemon(agent="static")


@pytest.fixture
def snap_client(make_daemon: Any, tmp_path: Path) -> Iterator[Client]:
    daemon = make_daemon(agent="static", state_dir=str(tmp_path / "state"))
    with Client(daemon.target) as client:
        yield client


def test_gzip_bzip2_and_xz_archives_are_unpacked(daemon: Any) -> None:
    import bz2
    import gzip

    plain = make_tar(("d/a.txt", "file", "packed\n"))
    with Client(daemon.target) as client, client.session() as session:
        for name, compress in (("gz", gzip.compress), ("bz2", bz2.compress), ("xz", lzma.compress)):
            session.upload(compress(plain), f"/workspace/{name}")
            read = session.call("read_file", {"path": f"/workspace/{name}/d/a.txt"})
            assert read.ok and read.output["content"] == "packed\n", (name, read)
