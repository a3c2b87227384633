"""The service unit and the daemon image recipe in packaging/: their settings are
toolrt's, their hardening is there, and the agent directory sits where the
engine on the host can mount it from. The sdist is source only."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from runtime.config import load_config
from runtime.sandbox.agent_dir import HELPER, HELPER_STAMP, STATIC_AGENT

PACKAGING = Path(__file__).resolve().parents[2] / "packaging"
UNIT = PACKAGING / "toolrt.service"
DOCKERFILE = PACKAGING / "Dockerfile"
DAEMON_TOML = PACKAGING / "daemon.toml"
SETTING = re.compile(r"\b(TOOLRT_[A-Z_]+)=(\S*)")


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNIT)
    return parser


def test_the_unit_runs_toolrt_serve_hardened():
    service = unit()["Service"]
    assert service["ExecStart"].split()[0].endswith("/toolrt")
    assert service["ExecStart"].split()[1] == "serve"
    hardening = {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "CapabilityBoundingSet": "",
        "RestrictSUIDSGID": "yes",
        "SystemCallFilter": "@system-service",
    }
    for key, value in hardening.items():
        assert service[key] == value, key
    assert service["KillSignal"] == "SIGTERM" and service["User"] != "root"


def test_the_units_and_the_images_settings_are_config_keys():
    environ = {}
    for name, value in SETTING.findall(UNIT.read_text()):
        environ[name] = value.strip('"')
    assert {"TOOLRT_AGENT_DIR", "TOOLRT_UNIX_SOCKET", "TOOLRT_LOG_FORMAT"} <= set(environ)
    config = load_config(None, environ=environ)
    assert config.log_format == "json" and config.agent_dir == "/var/lib/toolrt/agent"
    image_config = load_config(DAEMON_TOML, environ={})
    assert image_config.log_format == "json" and image_config.listen == ""


def test_every_path_the_image_hands_the_engine_is_a_volume_at_the_same_path():
    text = DOCKERFILE.read_text()
    config = load_config(DAEMON_TOML, environ={})
    (volumes,) = re.findall(r"^VOLUME \[(.*)\]$", text, re.M)
    declared = [v.strip(' "') for v in volumes.split(",")]
    for path in (config.agent_dir, config.state_dir, config.network.socket_dir, config.unix_socket):
        assert any(path.startswith(v + "/") for v in declared), path
    # The run lines mount those volumes at the same paths on the host.
    for volume in declared:
        assert f"-v {volume}:{volume}" in text
    assert "COPY packaging/daemon.toml /etc/toolrt/toolrt.toml" in text
    assert re.search(r"^ENTRYPOINT \[\"toolrt\"\]$", text, re.M)


def test_systemd_accepts_the_unit(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:  # checked by the tests above on hosts without systemd
        return
    copy = tmp_path / "toolrt.service"
    copy.write_text(re.sub(r"^ExecStart=\S+", "ExecStart=/bin/true", UNIT.read_text(), flags=re.M))
    done = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True)
    problems = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if "toolrt.service" in line and "docker.service" not in line
    ]
    assert problems == [], problems


def test_the_sdist_leaves_out_the_binaries_built_in_the_tree(tmp_path):
    # They are for the platform wheel (`make wheel`); an sdist builds on any
    # architecture, where the daemon compiles the helper itself.
    root = PACKAGING.parent
    built = [root / "runtime" / "agent" / name for name in (STATIC_AGENT, HELPER)]
    assert all(path.is_file() for path in built), "make test-fast builds both"
    script = "import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])"
    subprocess.run([sys.executable, "-c", script, tmp_path], cwd=root, check=True, timeout=120)
    (sdist,) = tmp_path.glob("toolrt-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {Path(name).name for name in archive.getnames()}
    assert "spawn.c" in names and "interpreter.py" in names
    assert not names & {STATIC_AGENT, HELPER, HELPER_STAMP}
