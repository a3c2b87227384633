"""Out of file descriptors is exhaustion, not a bug: never INTERNAL, logged once a minute."""

from __future__ import annotations

import asyncio
import errno
import logging

import grpc
import psutil
import pytest

from runtime import descriptors
from runtime.client import Client, ToolrtRpcError
from runtime.tools import files

EMFILE = OSError(errno.EMFILE, "Too many open files")


@pytest.fixture(autouse=True)
def _report_again() -> None:
    # The report is once a minute per process: another test may have spent it.
    descriptors.EXHAUSTION._next = 0.0


def no_descriptors(*args, **kwargs):
    raise EMFILE


def test_rpcs_and_calls_out_of_descriptors_are_unavailable_and_limits(
    make_daemon, monkeypatch, caplog
):
    daemon = make_daemon(backend="fake")
    with Client(daemon.target) as client:
        session = client.create_session()
        with caplog.at_level(logging.ERROR):
            # Admission reads /proc/meminfo, which needs a descriptor.
            monkeypatch.setattr(psutil, "virtual_memory", no_descriptors)
            for _ in range(3):
                with pytest.raises(ToolrtRpcError) as info:
                    client.create_session()
                assert info.value.code == grpc.StatusCode.UNAVAILABLE
                assert "out of file descriptors" in info.value.details
            # A tool call that meets it is a limit the model can wait out.
            monkeypatch.setattr(files, "asked_path", no_descriptors)
            result = client.call(session.id, "write_file", {"path": "a.txt", "content": "a"})
            assert result.error_code == "LIMIT_EXCEEDED", result
            assert "out of file descriptors" in result.error_message
    reports = [r for r in caplog.records if "out of file descriptors" in r.getMessage()]
    assert len(reports) == 1 and not any(r.exc_info for r in caplog.records)


def test_the_loop_reports_refused_accepts_once(caplog):
    async def main() -> None:
        loop = asyncio.get_running_loop()
        descriptors.quiet_exhaustion(loop)
        for _ in range(100):
            loop.call_exception_handler(
                {"message": "socket.accept() out of system resource", "exception": EMFILE}
            )

    with caplog.at_level(logging.ERROR):
        asyncio.run(main())
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is None
    assert "socket.accept() out of system resource" in caplog.records[0].getMessage()


def test_an_exhausted_error_is_found_behind_the_ones_raised_from_it():
    wrapped = RuntimeError("wrapped")
    wrapped.__cause__ = EMFILE
    assert descriptors.out_of_descriptors(wrapped)
    assert not descriptors.out_of_descriptors(OSError(errno.ENOENT, "no"))
    assert not descriptors.out_of_descriptors(None)
