"""What toolrt is measured against, in the same run: the host floor, plain
Docker (SDK, CLI, create/remove, archives) and llm-sandbox.

Every container started here carries `toolrt.daemon=<run instance>` so one
label query removes them all (see `cleanup`).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import docker

from bench.stats import Sample, callers, missing, timed
from runtime.config import Config
from runtime.sandbox.backend import LABEL_DAEMON, SandboxSpec
from runtime.sandbox.docker.backend import DockerBackend, container_name

IMAGE = "toolrt-sandbox:default"
KiB, MiB = 1 << 10, 1 << 20


def tar_of(name: str, data: bytes) -> bytes:
    """A tar archive holding one file."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def get_one(container: Any, path: str) -> bytes:
    """One file's bytes out of a container, by get_archive and unpacking."""
    stream, _ = container.get_archive(path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.extractfile(os.path.basename(path))
        assert member is not None
        return member.read()


class Baselines:
    def __init__(self, instance: str, quick: bool) -> None:
        self.instance = instance
        self.quick = quick
        self.client = docker.from_env(timeout=120)
        # The daemon's own container recipe (same image, same hardening),
        # without the attach and hello that make it a toolrt session.
        self._backend = DockerBackend(Config(instance=instance))
        # Its agent on stdio: nothing listens on a channel socket here, and
        # an agent that cannot dial one exits (its container with it).
        self._backend._channel = False
        self._config = self._backend._config

    def n(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    # -- containers ------------------------------------------------------------
    def _spec(self) -> SandboxSpec:
        return SandboxSpec(session_id=uuid.uuid4().hex, image=IMAGE, limits=self._config.defaults)

    def create_start(self) -> str:
        spec = self._spec()
        container_id = self._backend._create_container(spec)
        self.client.api.start(container_id)
        return spec.session_id

    def kill_remove(self, session_id: str) -> None:
        self.client.api.remove_container(container_name(session_id), force=True, v=True)

    def lifecycle_once(self) -> tuple[float, float]:
        """Seconds to create+start one container, and to kill+remove it."""
        started = time.perf_counter()
        sid = self.create_start()
        created = time.perf_counter() - started
        time.sleep(0.05)
        started = time.perf_counter()
        self.kill_remove(sid)
        return created, time.perf_counter() - started

    # -- exec ------------------------------------------------------------------
    @staticmethod
    def host_once() -> None:
        subprocess.run(["/bin/bash", "-c", "true"], check=True)

    @contextlib.contextmanager
    def exec_target(self) -> Iterator[tuple[Callable[[], Any], Callable[[], Any] | None]]:
        """A container, and how to exec `true` in it by SDK and by CLI (None
        without a docker CLI)."""
        sid = self.create_start()
        try:
            container = self.client.containers.get(container_name(sid))
            docker_cli = shutil.which("docker") or "/usr/bin/docker"
            cli = None
            if os.path.exists(docker_cli):

                def cli() -> None:
                    subprocess.run([docker_cli, "exec", container.id, "true"], check=True)

            yield (lambda: container.exec_run(["true"])), cli
        finally:
            self.kill_remove(sid)

    def exec_run_throughput(
        self, sessions: int, seconds: float, callers_per_session: int = 1
    ) -> Sample:
        """`sessions` containers, `callers_per_session` threads each calling
        exec_run in a loop: the shape of ours.load."""
        sids = [self.create_start() for _ in range(sessions)]
        threads_n = sessions * callers_per_session
        sample = Sample(f"SDK exec_run {sessions} sessions x {callers(callers_per_session)}")
        lock = threading.Lock()
        # A connection per thread, as each toolrt caller has its stream: the
        # SDK's default pool (10) would make the rest queue or reconnect.
        client = docker.from_env(timeout=120, max_pool_size=threads_n)
        try:
            containers = [client.containers.get(container_name(s)) for s in sids]
            stop_at = time.perf_counter() + seconds

            def loop(container: Any) -> None:
                local = []
                while time.perf_counter() < stop_at:
                    started = time.perf_counter()
                    container.exec_run(["true"])
                    local.append(time.perf_counter() - started)
                with lock:
                    sample.times.extend(local)

            threads = [
                threading.Thread(target=loop, args=(c,))
                for c in containers
                for _ in range(callers_per_session)
            ]
            begun = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            sample.calls_per_s = len(sample.times) / (time.perf_counter() - begun)
        finally:
            client.close()
            for sid in sids:
                self.kill_remove(sid)
        return sample

    # -- files -----------------------------------------------------------------
    @contextlib.contextmanager
    def archive_container(self) -> Iterator[Any]:
        """A plain container of the sandbox image for put_archive/get_archive.

        The engine's archive API cannot write under a read-only root or into
        a tmpfs, so this container keeps a writable root: the baseline gets
        the easier case."""
        container = self.client.containers.run(
            IMAGE,
            ["sleep", "infinity"],
            detach=True,
            network_mode="none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            labels={LABEL_DAEMON: self.instance},
            entrypoint=[],
        )
        try:
            yield container
        finally:
            container.remove(force=True)

    @contextlib.contextmanager
    def archive_calls(self) -> Iterator[tuple[Callable[[], Any], Callable[[], Any]]]:
        """put_archive of 1 KiB and get_archive of 1 MiB (+ tar packing), as
        calls to time beside toolrt's file tools."""
        with self.archive_container() as container:
            small = os.urandom(KiB)
            container.put_archive("/tmp", tar_of("big.txt", os.urandom(MiB)))
            yield (
                lambda: container.put_archive("/tmp", tar_of("small.txt", small)),
                lambda: get_one(container, "/tmp/big.txt"),
            )

    # -- the peer --------------------------------------------------------------
    def llm_sandbox(self) -> tuple[Sample, Sample]:
        try:
            return self._llm_sandbox()
        except Exception as exc:  # noqa: BLE001 - the rest of the run still counts
            why = f"llm-sandbox failed: {type(exc).__name__}: {str(exc)[:120]}"
            return missing("llm-sandbox execute_command true", why), missing(
                "llm-sandbox open+first command", why
            )

    def _llm_sandbox(self) -> tuple[Sample, Sample]:
        from llm_sandbox import SandboxSession

        def session() -> Any:
            return SandboxSession(
                lang="python",
                image=IMAGE,
                keep_template=True,
                skip_environment_setup=True,
                workdir="/tmp",
                runtime_configs={
                    # The image has no CMD of its own (toolrt runs its agent);
                    # as PID 1 this must exit on TERM, or close() waits 10 s.
                    "command": ["sh", "-c", "trap 'exit 0' TERM; sleep infinity & wait"],
                    "network_mode": "none",
                    "labels": {LABEL_DAEMON: self.instance},
                },
            )

        opened = Sample("llm-sandbox open+first command")
        for _ in range(self.n(6, 3)):
            started = time.perf_counter()
            s = session()
            s.open()
            s.execute_command("true")
            opened.times.append(time.perf_counter() - started)
            s.close()
        s = session()
        s.open()
        try:
            exec_sample = timed(
                "llm-sandbox execute_command true",
                self.n(60, 15),
                lambda: s.execute_command("true"),
            )
        finally:
            s.close()
        return exec_sample, opened

    # -- cleanup ---------------------------------------------------------------
    def cleanup(self) -> int:
        left = self.client.containers.list(
            all=True, filters={"label": f"{LABEL_DAEMON}={self.instance}"}
        )
        for container in left:
            container.remove(force=True)
        return len(left)

    def close(self) -> None:
        self.client.close()
