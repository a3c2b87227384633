"""The daemon's own image (packaging/Dockerfile): built offline on the sandbox
image from a wheelhouse, it drives the host's engine through its socket and
serves a session, with every path it hands the engine the same inside and out."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.sandbox.agent_dir import HELPER, HELPER_STAMP, STATIC_AGENT
from tests.conftest import IMAGE
from tests.helpers import containers_of, copy_tracked_tree, run, wait_for

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)
def test_the_daemon_image_serves_a_session_and_stops_clean(docker_client, tmp_path):
    source = tmp_path / "src"
    copy_tracked_tree(source)
    # The agent and launcher `make agent` built (`make daemon-image` builds
    # from the checkout, where they are): the image has no Go and no compiler.
    for name in (STATIC_AGENT, HELPER, HELPER_STAMP):
        shutil.copy2(ROOT / "runtime" / "agent" / name, source / "runtime" / "agent" / name)
    run(sys.executable, "-m", "pip", "wheel", "-q", "-w", source / "dist" / "wheels", source,
        cwd=tmp_path, timeout=600)  # fmt: skip
    tag = f"toolrt-daemon-test:{uuid.uuid4().hex[:8]}"
    dockerfile = source / "packaging" / "Dockerfile"
    run("docker", "build", "-q", "--build-arg", f"BASE={IMAGE}", "--label", "toolrt.test=1",
        "-f", dockerfile, "-t", tag, source, cwd=tmp_path, timeout=600)  # fmt: skip
    # The engine resolves bind-mount sources on the host: one directory, the
    # same path inside and out, for the agent, the socket and the relay sockets.
    shared = Path(tempfile.mkdtemp(prefix="trd.", dir="/tmp"))
    shared.chmod(0o755)
    instance = f"test-dimg-{uuid.uuid4().hex[:8]}"
    config = shared / "toolrt.toml"
    config.write_text(
        f'instance = "{instance}"\nimage = "{IMAGE}"\nagent_dir = "{shared}/agent"\n'
        f'state_dir = "{shared}/state"\nunix_socket = "{shared}/toolrt.sock"\n'
        f'unix_socket_mode = 0o666\n[network]\nsocket_dir = "{shared}/relay"\n'
        '[extra_labels]\n"toolrt.test" = "1"\n'
    )
    daemon = docker_client.containers.run(
        tag,
        ["serve", "--config", str(config)],
        detach=True,
        network_mode="none",
        labels={"toolrt.test": "1"},
        volumes={
            "/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"},
            str(shared): {"bind": str(shared), "mode": "rw"},
        },
    )
    try:
        target = f"unix:{shared}/toolrt.sock"
        wait_for(lambda: os.path.exists(f"{shared}/toolrt.sock") or _exited(daemon), timeout=60)
        assert not _exited(daemon), daemon.logs()[-3000:]
        with Client(target) as client:
            session = client.session()
            result = session.shell("echo from-the-daemon-image; id -u")
            assert result.output["stdout"] == "from-the-daemon-image\n1000\n", result
            assert session.call("write_file", {"path": "a.txt", "content": "x"}).ok
            session.close()
        daemon.stop(timeout=30)
        assert daemon.wait(timeout=30)["StatusCode"] == 0, daemon.logs()[-3000:]
        assert containers_of(docker_client, instance) == []
    finally:
        daemon.remove(force=True)
        for left in containers_of(docker_client, instance):
            left.remove(force=True)
        subprocess.run(["rm", "-rf", str(shared)], check=False)
        docker_client.images.remove(tag, force=True)


def _exited(container) -> bool:
    container.reload()
    return container.status == "exited"
