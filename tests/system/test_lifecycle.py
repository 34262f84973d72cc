"""Buffers driven through their lifecycle by real dacd processes: real playbooks, real
filesystems on loop devices, real kill -9."""

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from clitools import pools, reached, revision, run, setup, slurm, step_started, wait_for
from mounts import mount_of, mounts, swaps

from daccore.records.models import State
from daccore.settings.config import load_config
from daccore.store import Store

GiB = 1 << 30


@pytest.mark.parametrize("capacity,fstype", [("512MiB", "xfs"), ("1GiB", "btrfs")])
def test_setup_builds_the_filesystem_and_teardown_frees_everything(dac, tmp_path, capacity, fstype):
    workdir, env, store = dac
    script = setup(env, tmp_path, 5, capacity)
    statuses = wait_for(reached(store, "5", State.CREATED), what="created")
    (host,) = statuses
    fs = workdir / "fs" / host / "5" / "mnt"
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


def slurm_call_in_background(env, *args):
    """A Slurm call that waits for dacd, as Slurm's would: it must survive dacd dying."""
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "dacctl"), "--function", *args],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def kill_during(workdir, env, store, name, step, since, call=None):
    """SIGKILL the dacd of buffer `name`'s host once it starts `step` (seen by watching every
    status written since revision `since`, so a step shorter than any poll is not missed),
    start a new one; returns the new dacd's process."""
    state = json.loads((workdir / "state.json").read_text())
    host = store.buffer(name).record.allocation.primary_host
    step_started(store, name, host, step, since, call)
    pid = next(d["pid"] for d in state["dacd"] if d["host"] == host)
    os.kill(pid, signal.SIGKILL)
    log = open(workdir / "logs" / f"dacd-{host}-restarted.log", "ab")
    return subprocess.Popen(
        [sys.executable, "-m", "dacd.main", "--config", env["DAC_CONFIG"], "--host", host],
        stdout=log,
        stderr=log,
        env={
            k: v
            for k, v in os.environ.items()
            if k not in ("DAC_ETCD_ENDPOINTS", "ETCDCTL_ENDPOINTS")
        },
    )


def test_a_dacd_killed_mid_create_finishes_after_a_restart(dac, tmp_path):
    workdir, env, store = dac
    script = tmp_path / "job6.sh"
    script.write_text("#!/bin/sh\n#DW jobdw capacity=512MiB pool=default\n")
    since = revision(store)
    slurm_call = slurm_call_in_background(
        env,
        "setup",
        "--token",
        "6",
        "--caller",
        "SLURM",
        "--user",
        "1234",
        "--groupid",
        "4321",
        "--job",
        str(script),
    )
    wait_for(lambda: store.buffer("6"), what="the buffer")
    proc = kill_during(workdir, env, store, "6", "create", since, slurm_call)
    try:
        wait_for(reached(store, "6", State.CREATED), what="created after the restart")
        host = store.buffer("6").record.allocation.primary_host
        assert mount_of(workdir / "fs" / host / "6" / "mnt")[2] == "xfs"
        assert slurm_call.wait(60) == 0 and slurm_call.stdout.read() == ""
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize(
    "function,step", [("pre_run", "mount"), ("post_run", "unmount"), ("teardown", "delete")]
)
def test_a_dacd_killed_mid_step_finishes_it_after_a_restart(dac, tmp_path, function, step):
    workdir, env, store = dac
    script = setup(env, tmp_path, 21, "512MiB", "#DW swap 16MiB")
    nodes = tmp_path / "nodes"
    nodes.write_text("node1\nnode2\n")
    before = {"pre_run": [], "post_run": ["pre_run"], "teardown": ["pre_run"]}[function]
    for f in before:
        slurm(env, f, 21, "--job", str(script), "--nodehostnamefile", str(nodes))
    host = store.buffer("21").record.allocation.primary_host
    killed = next(
        d["pid"]
        for d in json.loads((workdir / "state.json").read_text())["dacd"]
        if d["host"] == host
    )
    since = revision(store)
    call = slurm_call_in_background(
        env, function, "--token", "21", "--job", str(script), "--nodehostnamefile", str(nodes)
    )
    proc = kill_during(workdir, env, store, "21", step, since, call)
    try:
        assert call.wait(120) == 0 and call.stdout.read() == ""
        binds = [m for m in mounts() if m.startswith(f"{workdir}/nodes/")]
        active = [f for f in swaps() if f.startswith(str(workdir))]
        if function == "pre_run":
            assert len(binds) == 4 and len(active) == 2  # striped + private, 2 nodes
            assert store.statuses("21").popitem()[1].attached == {"21": ["node1", "node2"]}
        else:
            assert binds == [] and active == []
        if function == "teardown":
            assert store.buffer("21") is None and store.claims() == {}
            assert not [m for m in mounts() if m.startswith(f"{workdir}/fs/")]
        # the killed dacd's playbook run directory: removed by its successor (by pid: another
        # local DAC on this machine has dacds of the same host names)
        assert list(Path(tempfile.gettempdir()).glob(f"dac-run-{killed}+*")) == []
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_failing_playbook_fails_setup_with_the_task_and_who_must_act(open_dir, tmp_path):
    workdir = open_dir / "small"
    run(
        "dacctl",
        "local",
        "up",
        "--workdir",
        str(workdir),
        "--servers",
        "1",
        "--bricks-per-server",
        "1",
        "--brick-size",
        "200MiB",
    )  # too small for mkfs.xfs
    try:
        env = {"DAC_CONFIG": str(workdir / "dac.yaml"), "DAC_ETCD_ENDPOINTS": ""}
        script = tmp_path / "job.sh"
        script.write_text("#!/bin/sh\n#DW jobdw capacity=100MiB pool=default\n")
        r = run(
            "dacctl",
            "--function",
            "setup",
            "--token",
            "9",
            "--caller",
            "SLURM",
            "--user",
            "1234",
            "--groupid",
            "4321",
            "--job",
            str(script),
            env=env,
            check=False,
        )
        assert r.returncode == 1 and r.stdout.count("\n") == 1
        assert r.stdout.startswith(
            "buffer 9: create failed on dac-server-1 at task 'make and "
            "mount the filesystem' (rc 1): mkfs.xfs"
        )
        assert r.stdout.endswith(": Filesystem must be larger than 300MB.\n")
        store = Store.from_settings(load_config(env["DAC_CONFIG"], env={}).etcd)
        (status,) = store.statuses("9").values()
        assert status.error is not None
        assert status.error.category.value == "admin" and "300MB" in status.error.detail
        # teardown still cleans up a buffer whose create failed
        run("dacctl", "--function", "teardown", "--token", "9", "--job", str(script), env=env)
        assert store.buffer("9") is None and store.claims() == {}
    finally:
        run("dacctl", "local", "down", "--workdir", str(workdir), check=False)


def test_a_drained_host_takes_no_new_buffers_and_keeps_serving_its_own(dac, tmp_path):
    workdir, env, store = dac
    first = setup(env, tmp_path, 31, "512MiB")
    drained = store.buffer("31").record.allocation.primary_host
    store.set_drained(drained, True)
    assert pools(env)["default"]["free_bricks"] == 2  # the drained host's free brick is out
    for job in (32, 33):
        setup(env, tmp_path, job, "512MiB")
        assert store.buffer(str(job)).record.allocation.hosts != [drained]
    r = run(
        "dacctl",
        "--function",
        "setup",
        "--token",
        "34",
        "--caller",
        "SLURM",
        "--user",
        "1234",
        "--groupid",
        "4321",
        "--job",
        str(first),
        env=env,
        check=False,
    )
    assert r.returncode == 1
    assert r.stdout.startswith("no host in pool 'default' has 1 brick of 512MiB free")
    # the drained host still runs its buffer's whole lifecycle
    nodes = tmp_path / "nodes"
    nodes.write_text("node1\n")
    for function in ("pre_run", "post_run", "teardown"):
        slurm(env, function, 31, "--job", str(first), "--nodehostnamefile", str(nodes))
    assert store.buffer("31") is None
    assert pools(env)["default"]["free_bricks"] == 0  # 32 and 33 hold the undrained bricks
