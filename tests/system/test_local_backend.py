"""The local backend's real playbooks through ansible-runner, on real loop devices."""

import os
import subprocess
from pathlib import Path

import pytest
from mounts import mount_of

from daccore.backends import get
from daccore.errors import ConfigError, Kind, PlaybookFailed
from daccore.records.models import Allocation, BrickRef, Buffer, BufferRequest
from daccore.settings.config import DacConfig
from dacd.runner import run_step
from daclocal import loopdev

MiB = 1 << 20


@pytest.fixture
def bricks(tmp_path):
    made: list[tuple[str, Path]] = []

    def make(n, size=512 * MiB):
        for _ in range(n):
            path = tmp_path / f"brick{len(made)}.img"
            made.append((loopdev.attach(path, size), path))
        return [d for d, _ in made[-n:]]

    yield make
    for device, path in made:
        subprocess.run(["umount", "-q", device], capture_output=True)
        loopdev.detach(device, path)


def setup_buffer(tmp_path, devices, access="striped,private"):
    config = DacConfig.model_validate(
        {
            "pools": {"p": {"granularity": 128 * MiB}},
            "hosts": {
                "h1": {
                    "fs_root": str(tmp_path / "fs"),
                    "bricks": [{"device": d, "capacity": 512 * MiB, "pool": "p"} for d in devices],
                }
            },
        }
    )
    buf = Buffer(
        name="77",
        owner_uid=1234,
        owner_gid=4321,
        request=BufferRequest(capacity=128 * MiB * len(devices), pool="p", access=access),
        allocation=Allocation(
            primary_host="h1",
            bricks=[
                BrickRef(host="h1", brick=os.path.basename(d), device=d, capacity=512 * MiB)
                for d in devices
            ],
        ),
    )
    return get("local", config, "h1").variables(buf, "create"), tmp_path / "fs" / "77" / "mnt"


@pytest.mark.parametrize("n,fstype", [(1, "xfs"), (3, "btrfs")])
def test_create_builds_mounts_and_owns_then_delete_leaves_nothing(tmp_path, bricks, n, fstype):
    devices = bricks(n)
    variables, fs = setup_buffer(tmp_path, devices)
    tasks: list[str] = []
    run_step("local", "create", "h1", variables, tasks.append)
    assert "make and mount the filesystem" in tasks
    mount = mount_of(fs)
    assert mount and mount[2] == fstype and {"nodev", "nosuid"} <= set(mount[3].split(","))
    for d in ("striped", "private"):
        st = os.stat(fs / d)
        assert (st.st_uid, st.st_gid, oct(st.st_mode & 0o777)) == (1234, 4321, "0o700")
    run_step("local", "create", "h1", variables)  # again, as after a dacd restart: no harm
    assert mount_of(fs)
    run_step("local", "delete", "h1", variables)
    assert mount_of(fs) is None and not fs.exists() and not fs.parent.exists()
    for device in devices:
        blkid = subprocess.run(["blkid", "-p", device], capture_output=True, text=True)
        assert "TYPE=" not in blkid.stdout  # signatures wiped
    run_step("local", "delete", "h1", variables)  # deleting twice is fine too


def test_a_dacd_older_than_the_closed_parent_keeps_its_layout_until_it_restarts(tmp_path, bricks):
    """The playbooks are read from the installed package at each run, dacd's code once at its
    start: after an upgrade, a dacd not yet restarted runs the new module with the old
    variables (no buffer_dir, the mount point straight in fs_root). The module keeps that
    layout for it, and fs_root is never taken for a buffer's closed directory (closed to
    every user but one, it would cut every other buffer's copier off)."""
    (device,) = bricks(1)
    variables, new_fs = setup_buffer(tmp_path, [device])
    legacy = new_fs.parent  # <fs_root>/77, as the old layout mounted it
    variables = {k: v for k, v in variables.items() if k != "buffer_dir"}
    variables["fs_path"] = str(legacy)
    variables["attach"] = {**variables["attach"], "fs_path": str(legacy)}
    run_step("local", "create", "h1", variables)
    assert mount_of(legacy) and not new_fs.exists()
    assert os.stat(tmp_path / "fs").st_mode & 0o001  # fs_root still passable by every user
    run_step("local", "delete", "h1", variables)
    assert mount_of(legacy) is None and not legacy.exists()


def test_a_failing_playbook_is_an_admin_error_naming_the_task(tmp_path, bricks):
    (device,) = bricks(1, size=64 * MiB)  # too small for xfs: mkfs.xfs refuses
    variables, _ = setup_buffer(tmp_path, [device])
    with pytest.raises(PlaybookFailed) as e:
        run_step("local", "create", "h1", variables)
    assert e.value.kind is Kind.ADMIN and e.value.task == "make and mount the filesystem"
    assert "create failed on h1 at task 'make and mount the filesystem'" in str(e.value)
    assert "300MB" in e.value.output and "\n" not in str(e.value)


def test_an_unknown_backend_names_the_choices():
    with pytest.raises(ConfigError, match=r"no such backend: 'nfs' \(choose daos, local, lustre\)"):
        get("nfs", DacConfig(), "h1")


def test_ansible_failing_before_any_task_still_says_why(tmp_path, bricks, monkeypatch):
    (device,) = bricks(1)
    variables, _ = setup_buffer(tmp_path, [device])
    project = tmp_path / "playbooks" / "local"
    project.mkdir(parents=True)
    (project / "create.yml").write_text("- hosts: all\n  tasks:\n    - nosuchmodule: {}\n")
    monkeypatch.setattr("dacd.runner.playbooks", lambda: tmp_path / "playbooks")
    with pytest.raises(PlaybookFailed) as e:
        run_step("local", "create", "h1", variables)
    assert e.value.task == "(before any task)" and "nosuchmodule" in e.value.output
