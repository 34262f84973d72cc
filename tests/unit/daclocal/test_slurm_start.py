"""A Slurm daemon that dies while the local DAC starts says how, in the one line."""

import os
import signal
import subprocess
from pathlib import Path

import pytest

from daccore.errors import AdminError
from daclocal.slurm import SlurmCluster


def started(cluster: SlurmCluster, name: str, argv: list[str]) -> subprocess.Popen:
    proc = subprocess.Popen(argv)
    cluster.pids[name], cluster.procs[name] = proc.pid, proc
    return proc


def test_a_daemon_that_exits_gives_its_status(tmp_path):
    cluster = SlurmCluster(tmp_path)
    started(cluster, "munged", ["sh", "-c", "exit 3", "munged"]).wait()
    with pytest.raises(AdminError) as e:
        cluster._wait(lambda: False, 5, "munged")
    assert str(e.value) == (
        f"Slurm did not start: munged exited (status 3) (logs: {tmp_path.resolve()}/slurm/log)"
    )


def test_a_daemon_killed_by_a_signal_names_it(tmp_path):
    cluster = SlurmCluster(tmp_path)
    proc = started(cluster, "slurmctld", ["sleep", "60"])
    proc.terminate()
    proc.wait()
    with pytest.raises(AdminError, match="start: slurmctld killed by SIGTERM"):
        cluster._wait(lambda: False, 5, "slurmctld")


def test_a_daemon_from_an_earlier_start_still_reads_as_exited(tmp_path):
    cluster = SlurmCluster(tmp_path, pids={"munged": 2**22 + 1})  # no such process
    with pytest.raises(AdminError, match="start: munged exited \\(logs"):
        cluster._wait(lambda: False, 5, "munged")


def test_a_daemon_that_never_gets_ready_says_what_was_awaited(tmp_path):
    cluster = SlurmCluster(tmp_path)
    with pytest.raises(AdminError, match="start: slurmd on node1 not ready in 0s"):
        cluster._wait(lambda: False, 0, "slurmd on node1")


def test_a_signal_without_a_name_is_given_by_number(tmp_path):
    cluster = SlurmCluster(tmp_path)
    proc = started(cluster, "munged", ["sleep", "60"])
    os.kill(proc.pid, signal.SIGRTMIN + 2)
    proc.wait()
    with pytest.raises(AdminError, match=f"start: munged killed by signal {signal.SIGRTMIN + 2} "):
        cluster._wait(lambda: False, 5, "munged")


def test_the_hooks_ask_the_answerer_unless_told_not_to(tmp_path, monkeypatch):
    monkeypatch.delenv("DAC_LOCAL_ANSWERER", raising=False)
    on = SlurmCluster(tmp_path)
    sock = f"{tmp_path.resolve()}/slurm/answerer/socket"
    assert on.answerer and on.hook_env()["DAC_ANSWERER_SOCKET"] == sock
    # under datawarp through the forwarder (GetSysState), which needs lua5.1: the host's 22.05
    # has it from the system packages, a chroot release from releases.PACKAGES
    assert SlurmCluster(tmp_path, plugin="datawarp").answerer == Path("/usr/bin/lua5.1").exists()
    assert SlurmCluster(tmp_path, answerer=False).hook_env()["DAC_ANSWERER_SOCKET"] == "none"
    monkeypatch.setenv("DAC_LOCAL_ANSWERER", "0")
    off = SlurmCluster(tmp_path)
    assert not off.answerer and off.hook_env()["DAC_ANSWERER_SOCKET"] == "none"
    assert SlurmCluster(tmp_path, answerer=True).answerer  # what `up` recorded wins


def test_an_answerer_that_exits_at_start_says_how_in_one_line(tmp_path, monkeypatch):
    cluster = SlurmCluster(tmp_path, answerer=True)
    (cluster.base / "log").mkdir(parents=True)
    bindir = tmp_path / "venv" / "bin"  # a dac-answerer that cannot read its config
    bindir.mkdir(parents=True)
    (bindir / "dac-answerer").write_text("#!/bin/sh\nexit 1\n")
    (bindir / "dac-answerer").chmod(0o755)
    monkeypatch.setattr("daclocal.slurm.sys.executable", str(bindir / "python"))
    with pytest.raises(AdminError, match=r"^dac-answerer did not start: exited \(status 1\)"):
        cluster._spawn_answerer(5)
