"""Buffers driven through their lifecycle by real dacd processes: real playbooks, real
filesystems on loop devices, real kill -9."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clitools import pools, run
from mounts import mount_of
from daccore.config import load_config
from daccore.models import State
from daccore.store import Store

GiB = 1 << 30


@pytest.fixture
def dac(tmp_path):
    """Local DAC, 2 servers x 2 bricks of 512 MiB (xfs needs more than 300 MB)."""
    workdir = tmp_path / "dac"
    run("dacctl", "local", "up", "--workdir", str(workdir), "--servers", "2",
        "--bricks-per-server", "2", "--brick-size", "512MiB")
    env = {"DAC_CONFIG": str(workdir / "dac.yaml"), "DAC_ETCD_ENDPOINTS": ""}
    yield workdir, env, Store.from_settings(load_config(env["DAC_CONFIG"], env={}).etcd)
    run("dacctl", "local", "down", "--workdir", str(workdir), check=False)


def setup(env, tmp_path, job, capacity):
    script = tmp_path / f"job{job}.sh"
    script.write_text(f"#!/bin/sh\n#DW jobdw capacity={capacity} access_mode=striped,private "
                      "pool=default\n")
    run("dacctl", "--function", "setup", "--token", str(job), "--caller", "SLURM", "--user",
        "1234", "--groupid", "4321", "--job", str(script), env=env)
    return script


def wait_for(check, timeout=120, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def reached(store, name, state):
    def check():
        statuses = store.statuses(name)
        for s in statuses.values():
            assert s.error is None, s.error
        return statuses and all(s.state is state for s in statuses.values()) and statuses
    return check


@pytest.mark.parametrize("capacity,fstype", [("512MiB", "xfs"), ("1GiB", "btrfs")])
def test_setup_builds_the_filesystem_and_teardown_frees_everything(dac, tmp_path, capacity,
                                                                   fstype):
    workdir, env, store = dac
    script = setup(env, tmp_path, 5, capacity)
    statuses = wait_for(reached(store, "5", State.CREATED), what="created")
    (host,) = statuses
    fs = workdir / "fs" / host / "5"
    mount = mount_of(fs)
    assert mount and mount[2] == fstype and {"nodev", "nosuid"} <= set(mount[3].split(","))
    st = os.stat(fs / "striped")
    assert (st.st_uid, st.st_gid, oct(st.st_mode & 0o777)) == (1234, 4321, "0o700")
    assert pools(env)["default"]["used_bricks"] == (1 if fstype == "xfs" else 2)

    run("dacctl", "--function", "teardown", "--token", "5", "--job", str(script), env=env)
    wait_for(lambda: store.buffer("5") is None, what="the buffer to be reaped")
    assert mount_of(fs) is None and not fs.exists()
    assert store.claims() == {} and store.statuses("5") == {}
    assert pools(env)["default"]["free_bricks"] == 4


def test_a_dacd_killed_mid_create_finishes_after_a_restart(dac, tmp_path):
    workdir, env, store = dac
    state = json.loads((workdir / "state.json").read_text())
    script = tmp_path / "job6.sh"
    script.write_text("#!/bin/sh\n#DW jobdw capacity=512MiB pool=default\n")
    # setup waits for dacd, as Slurm's call would: it must survive dacd dying under it
    slurm_call = subprocess.Popen(
        [str(Path(sys.executable).parent / "dacctl"), "--function", "setup", "--token", "6",
         "--caller", "SLURM", "--user", "1234", "--groupid", "4321", "--job", str(script)],
        env={**os.environ, **env}, stdout=subprocess.PIPE, text=True)
    wait_for(lambda: store.buffer("6"), what="the buffer")
    host = store.buffer("6").record.allocation.primary_host
    pid = next(d["pid"] for d in state["dacd"] if d["host"] == host)
    wait_for(lambda: (s := store.statuses("6").get(host)) and s.step.startswith("create"),
             what="create to start")
    os.kill(pid, signal.SIGKILL)
    log = open(workdir / "logs" / f"dacd-{host}-restarted.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "dacd.main", "--config", env["DAC_CONFIG"],
                             "--host", host], stdout=log, stderr=log,
                            env={k: v for k, v in os.environ.items()
                                 if k not in ("DAC_ETCD_ENDPOINTS", "ETCDCTL_ENDPOINTS")})
    try:
        wait_for(reached(store, "6", State.CREATED), what="created after the restart")
        assert mount_of(workdir / "fs" / host / "6")[2] == "xfs"
        assert slurm_call.wait(60) == 0 and slurm_call.stdout.read() == ""
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_failing_playbook_fails_setup_with_the_task_and_who_must_act(tmp_path):
    workdir = tmp_path / "small"
    run("dacctl", "local", "up", "--workdir", str(workdir), "--servers", "1",
        "--bricks-per-server", "1", "--brick-size", "200MiB")  # too small for mkfs.xfs
    try:
        env = {"DAC_CONFIG": str(workdir / "dac.yaml"), "DAC_ETCD_ENDPOINTS": ""}
        script = tmp_path / "job.sh"
        script.write_text("#!/bin/sh\n#DW jobdw capacity=100MiB pool=default\n")
        r = run("dacctl", "--function", "setup", "--token", "9", "--caller", "SLURM", "--user",
                "1234", "--groupid", "4321", "--job", str(script), env=env, check=False)
        assert r.returncode == 1 and r.stdout.count("\n") == 1
        assert r.stdout.startswith("buffer 9: create failed on dac-server-1 at task 'make the "
                                   "filesystem' (rc 1):")
        store = Store.from_settings(load_config(env["DAC_CONFIG"], env={}).etcd)
        (status,) = store.statuses("9").values()
        assert status.error.category.value == "admin" and "300MB" in status.error.detail
        # teardown still cleans up a buffer whose create failed
        run("dacctl", "--function", "teardown", "--token", "9", "--job", str(script), env=env)
        assert store.buffer("9") is None and store.claims() == {}
    finally:
        run("dacctl", "local", "down", "--workdir", str(workdir), check=False)


def test_when_a_hosts_lease_expires_its_buffers_report_the_failure(dac, tmp_path):
    workdir, env, store = dac
    state = json.loads((workdir / "state.json").read_text())
    script = setup(env, tmp_path, 8, "512MiB")
    host = store.buffer("8").record.allocation.primary_host
    os.kill(next(d["pid"] for d in state["dacd"] if d["host"] == host), signal.SIGKILL)
    wait_for(lambda: host not in store.alive(), what="the lease to expire")  # lease_ttl 5 s
    assert pools(env)["default"]["hosts_down"] == 1
    start = time.monotonic()
    r = run("dacctl", "--function", "data_in", "--token", "8", "--job", str(script), env=env,
            check=False)
    assert time.monotonic() - start < 10  # at once, not after step_timeout
    assert (r.returncode, r.stdout) == (1, f"buffer 8: storage host {host} is down (its dacd's "
                                           "lease expired); restart dacd there, or tear the job "
                                           "down\n")
