import os
import shutil
import tempfile
from pathlib import Path

import pytest
from clitools import run

from daccore.settings.config import load_config
from daccore.store import Store


@pytest.fixture(scope="session", autouse=True)
def needs_root():
    # Loop devices and mounts need root; a run without it must fail loudly, not skip.
    assert os.geteuid() == 0, "system tests need root (loop devices, mounts): run make test as root"


@pytest.fixture
def open_dir():
    """A directory other users can enter (pytest's tmp_path is root-only): jobs reach their
    buffers under a local DAC's workdir as the job's user."""
    path = Path(tempfile.mkdtemp(prefix="dac-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def local_dac(open_dir):
    """A local DAC with 2 servers x 4 bricks of 512 MiB (xfs needs more than 300 MB); yields
    its env; always torn down."""
    workdir = open_dir / "dac"
    run(
        "dacctl",
        "local",
        "up",
        "--workdir",
        str(workdir),
        "--servers",
        "2",
        "--bricks-per-server",
        "4",
        "--brick-size",
        "512MiB",
    )
    lines = run("dacctl", "local", "env", "--workdir", str(workdir)).stdout.splitlines()
    env = dict(line.removeprefix("export ").split("=", 1) for line in lines)
    yield workdir, env
    run("dacctl", "local", "down", "--workdir", str(workdir), check=False)


@pytest.fixture
def dac(open_dir):
    """Local DAC, 2 servers x 2 bricks of 512 MiB (xfs needs more than 300 MB)."""
    workdir = open_dir / "dac"
    run(
        "dacctl",
        "local",
        "up",
        "--workdir",
        str(workdir),
        "--servers",
        "2",
        "--bricks-per-server",
        "2",
        "--brick-size",
        "512MiB",
    )
    env = {"DAC_CONFIG": str(workdir / "dac.yaml"), "DAC_ETCD_ENDPOINTS": ""}
    yield workdir, env, Store.from_settings(load_config(env["DAC_CONFIG"], env={}).etcd)
    run("dacctl", "local", "down", "--workdir", str(workdir), check=False)
