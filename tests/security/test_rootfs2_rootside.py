"""Issue 16, root's side of a buffer: what dacd does as root on a tree the job's user can write.
Real dacd processes, the real local playbooks, loop devices; the attacker is uid 1234 acting
directly in its buffer (as a job or a stage line would), a bystander is uid 5678."""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from clitools import pools, run, setup, slurm
from mounts import mounts

from daccore.settings.config import load_config
from daccore.store import Store

UID, GID = 1234, 4321
OTHER_UID, OTHER_GID = 5678, 8765
PATTERN = b"rootfs2:last-user-secret:"  # 25 bytes: never all zero, never in a fresh xfs


@pytest.fixture
def rootfs2_dac():
    """A local DAC, 2 servers x 2 bricks of 512 MiB, in a directory other users can enter."""
    assert os.geteuid() == 0, "these tests need root (loop devices, mounts)"
    top = Path(tempfile.mkdtemp(prefix="dac-rootfs2-"))
    top.chmod(0o755)
    workdir = top / "dac"
    # dacd's own temp dir: a dacd starting in another local DAC on this machine (same host
    # names) sweeps /tmp/dac-run-<host>+* and would remove this DAC's live runs
    (top / "tmp").mkdir(mode=0o700)
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
        env={"TMPDIR": str(top / "tmp")},
    )
    env = {"DAC_CONFIG": str(workdir / "dac.yaml"), "DAC_ETCD_ENDPOINTS": ""}
    try:
        yield top, workdir, env, Store.from_settings(load_config(env["DAC_CONFIG"], env={}).etcd)
    finally:
        run("dacctl", "local", "down", "--workdir", str(workdir), check=False)
        shutil.rmtree(top, ignore_errors=True)


def as_user(*argv, uid=UID, gid=GID):
    return subprocess.run(
        argv, user=uid, group=gid, extra_groups=[], capture_output=True, text=True
    )


def nodes_file(tmp_path, *nodes):
    f = tmp_path / "nodes"
    f.write_text("".join(n + "\n" for n in nodes))
    return str(f)


def buffer_fs(workdir, store, job):
    host = store.buffer(str(job)).record.allocation.primary_host
    return workdir / "fs" / host / str(job) / "mnt"


def test_a_link_planted_in_the_buffer_is_not_followed_by_pre_run(rootfs2_dac, tmp_path):
    top, workdir, env, store = rootfs2_dac
    decoy = top / "decoy"  # stands for /etc: root's, 0755, with content
    decoy.mkdir(mode=0o755)
    (decoy / "passwd").write_text("root's\n")
    script = setup(env, tmp_path, 7, "512MiB")
    fs = buffer_fs(workdir, store, 7)
    # the chain the issue found, planted by the user after setup and before pre_run
    assert as_user("ln", "-s", "../private", str(fs / "striped" / "p")).returncode == 0
    assert as_user("ln", "-s", str(decoy), str(fs / "striped" / "p" / "node1")).returncode == 0
    assert os.path.islink(fs / "private" / "node1")

    r = slurm(
        env,
        "pre_run",
        7,
        "--job",
        str(script),
        "--nodehostnamefile",
        nodes_file(tmp_path, "node1"),
        check=False,
    )
    assert r.returncode != 0
    out = (r.stdout + r.stderr).strip()
    assert len(out.splitlines()) == 1 and "Traceback" not in out
    assert f"{fs}/private/node1: a link or a file where a directory belongs" in out
    st = os.lstat(decoy)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 0, 0o755)
    assert (decoy / "passwd").read_text() == "root's\n"
    assert os.readlink(fs / "private" / "node1") == str(decoy)  # left alone
    assert not [m for m in mounts() if m.startswith(str(workdir / "nodes") + "/")]

    slurm(env, "teardown", 7, "--job", str(script))  # the next job still gets the bricks
    assert store.buffer("7") is None and pools(env)["default"]["free_bricks"] == 4
    assert os.lstat(decoy).st_uid == 0 and (decoy / "passwd").read_text() == "root's\n"


def test_processes_left_in_the_buffer_cannot_pin_it(rootfs2_dac, tmp_path):
    top, workdir, env, store = rootfs2_dac
    script = setup(env, tmp_path, 8, "512MiB")
    slurm(
        env, "pre_run", 8, "--job", str(script), "--nodehostnamefile", nodes_file(tmp_path, "node1")
    )
    node = workdir / "nodes" / "node1" / "8"
    fs = buffer_fs(workdir, store, 8)
    kw: dict[str, Any] = {
        "user": UID,
        "group": GID,
        "extra_groups": [],
        "stdin": subprocess.DEVNULL,
    }
    in_cwd = subprocess.Popen(["sleep", "1000"], cwd=node / "striped", **kw)
    with_fd = subprocess.Popen(
        ["sh", "-c", 'exec 3>"$1"; exec sleep 1000', "sh", str(node / "private" / "held")],
        cwd="/",
        **kw,
    )
    on_server = subprocess.Popen(["sleep", "1000"], cwd=fs / "striped", **kw)
    bystander = subprocess.Popen(
        ["sleep", "1000"],
        cwd="/tmp",
        user=OTHER_UID,
        group=OTHER_GID,
        extra_groups=[],
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not (node / "private" / "held").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (node / "private" / "held").exists()

        slurm(env, "post_run", 8, "--job", str(script))
        slurm(env, "teardown", 8, "--job", str(script))
        assert store.buffer("8") is None and pools(env)["default"]["free_bricks"] == 4
        assert not [
            m for m in mounts() if m.startswith(str(workdir / "nodes") + "/") or m == str(fs)
        ]
        for p in (in_cwd, with_fd, on_server):
            assert p.wait(timeout=10) == -9
        assert bystander.poll() is None  # a process outside the buffer is never touched
    finally:
        for p in (in_cwd, with_fd, on_server, bystander):
            p.kill()
            p.wait()


def count_pattern(device):
    found, tail = 0, b""
    with open(device, "rb") as f:
        while chunk := f.read(8 << 20):
            found += (tail + chunk).count(PATTERN)
            tail = chunk[-(len(PATTERN) - 1) :]
    return found


def test_the_raw_device_holds_none_of_the_last_users_data_after_teardown(rootfs2_dac, tmp_path):
    top, workdir, env, store = rootfs2_dac
    script = setup(env, tmp_path, 9, "512MiB")
    fs = buffer_fs(workdir, store, 9)
    devices = [b.device for b in store.buffer("9").record.allocation.bricks]
    w = as_user(
        "python3",
        "-c",
        "import os,sys; fd=os.open(sys.argv[1], os.O_WRONLY|os.O_CREAT, 0o600); "
        f"os.write(fd, {PATTERN!r} * (1 << 18)); os.fsync(fd)",
        str(fs / "striped" / "secret"),
    )
    assert w.returncode == 0, w.stderr
    subprocess.run(["sync"], check=True)
    assert sum(count_pattern(d) for d in devices) >= 1 << 18  # really on the brick

    slurm(env, "teardown", 9, "--job", str(script))
    assert store.buffer("9") is None
    assert [count_pattern(d) for d in devices] == [0] * len(devices)
    for d in devices:
        blkid = subprocess.run(["blkid", "-p", d], capture_output=True, text=True)
        assert "TYPE=" not in blkid.stdout
