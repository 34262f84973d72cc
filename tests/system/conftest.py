import os

import pytest

from clitools import run


@pytest.fixture(scope="session", autouse=True)
def needs_root():
    # Loop devices and mounts need root; a run without it must fail loudly, not skip.
    assert os.geteuid() == 0, "system tests need root (loop devices, mounts): run make test as root"


@pytest.fixture
def local_dac(tmp_path):
    """A local DAC with 2 servers x 4 bricks of 512 MiB (xfs needs more than 300 MB); yields
    its env; always torn down."""
    workdir = tmp_path / "dac"
    run("dacctl", "local", "up", "--workdir", str(workdir), "--servers", "2",
        "--bricks-per-server", "4", "--brick-size", "512MiB")
    lines = run("dacctl", "local", "env", "--workdir", str(workdir)).stdout.splitlines()
    env = dict(line.removeprefix("export ").split("=", 1) for line in lines)
    yield workdir, env
    run("dacctl", "local", "down", "--workdir", str(workdir), check=False)

