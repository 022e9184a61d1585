"""The release installs like any Python package: `make dist`'s wheel in a clean venv gives a
working `pycni` — its version, `pycni plugins install` (the C entry points compiled there, at
install time, with the system's cc) and `pycni daemon`, which then serves a pod's ADD and DEL
made through those entry points. Nothing of the checkout is on the venv's path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pycni import __version__
from tests import harness

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def _run(*argv: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, **kwargs)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = _run(sys.executable, "-m", "build", "--outdir", str(out), str(REPO))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_sdist_and_wheel_are_built(dist: Path) -> None:
    names = sorted(p.name for p in dist.iterdir())
    assert names == [f"pycni-{__version__}-py3-none-any.whl", f"pycni-{__version__}.tar.gz"]


def test_the_wheel_works_from_a_clean_venv(
    dist: Path, tmp_path: Path, node: harness.Namespace, pod_factory: object
) -> None:
    venv = tmp_path / "venv"
    assert _run(sys.executable, "-m", "venv", str(venv)).returncode == 0
    wheel = next(dist.glob("*.whl"))
    pip = _run(str(venv / "bin/python"), "-m", "pip", "install", "-q", str(wheel))
    assert pip.returncode == 0, pip.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = _run(
        str(venv / "bin/python"), "-c", "import pycni; print(pycni.__file__)", cwd="/", env=env
    )
    assert where.stdout.startswith(str(venv)), where.stdout  # the wheel's copy, not the checkout

    version = _run(str(venv / "bin/pycni"), "--version", env=env)
    assert version.returncode == 0 and version.stdout == f"pycni {__version__}\n"

    plugins, sock = tmp_path / "bin", tmp_path / "run/pycni.sock"
    sock.parent.mkdir()
    started = time.monotonic()
    install = _run(
        str(venv / "bin/pycni"), "plugins", "install", str(plugins), "--socket", str(sock), env=env
    )
    install_seconds = time.monotonic() - started
    assert install.returncode == 0, install.stderr
    print(f"pycni plugins install from the wheel: {install_seconds:.2f} s")
    first = (plugins / "loopback").read_bytes()[:4]
    assert first == b"\x7fELF", "the C entry point was not compiled at install time"

    daemon = subprocess.Popen(
        ["nsenter", f"--net={node.path}", str(venv / "bin/pycni"), "daemon", "--socket", str(sock)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while _run(str(venv / "bin/pycni"), "daemon", "--ping", "--socket", str(sock)).returncode:
            assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
            assert time.monotonic() < deadline, "the daemon from the wheel never answered"
            time.sleep(0.1)
        pod = pod_factory()  # type: ignore[operator]
        config = json.dumps({"cniVersion": "1.0.0", "name": "lo", "type": "loopback"})
        call_env = {
            **env,
            "CNI_COMMAND": "ADD",
            "CNI_CONTAINERID": "wheel-pod",
            "CNI_NETNS": pod.path,
            "CNI_IFNAME": "lo",
            "CNI_PATH": str(plugins),
        }
        add = _run(
            "nsenter", f"--net={node.path}", str(plugins / "loopback"), input=config, env=call_env
        )
        assert add.returncode == 0, add.stdout + add.stderr
        assert json.loads(add.stdout)["interfaces"][0]["name"] == "lo"
        dele = _run(
            "nsenter",
            f"--net={node.path}",
            str(plugins / "loopback"),
            input=config,
            env={**call_env, "CNI_COMMAND": "DEL"},
        )
        assert dele.returncode == 0, dele.stdout + dele.stderr
        stats = _run(str(venv / "bin/pycni"), "daemon", "--stats", "--socket", str(sock), env=env)
        assert json.loads(stats.stdout)["counts"]["calls"] >= 2, stats.stdout
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
