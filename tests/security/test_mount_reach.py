"""Issue 45, item 1: no other user reaches or holds a buffer's mounts, and a holder that no
process shows (a descriptor in flight over a unix socket) delays teardown only while it
lasts: every mount dac made is retried until it is gone. Real dacd, the real local playbooks
through ansible-runner, a loop-device brick; uid 1234 the job's user, uid 5678 another."""

import re
import subprocess
import sys

import pytest
from clitools import pools, setup, slurm, wait_for
from leftovers import LEFTOVER
from security.staging_dac import GID, OTHER_GID, OTHER_UID, UID, buffer_fs, down, owned, up
from security.test_teardown_holders import (
    alive,
    ends_and_frees,
    exclusive,
    kill,
    mounted_anywhere,
    next_buffer_builds,
    running_job,
    started,
)

#: Run as a user: the O_PATH open and statvfs of argv[1] (a buffer's node mount), as
#: "opened <f_blocks>" or the error's name; neither needs any permission on the mount itself.
_PROBE = r"""
import os, sys
try:
    fd = os.open(sys.argv[1], os.O_PATH)
    print("opened", os.statvfs(sys.argv[1]).f_blocks)
except OSError as e:
    print(type(e).__name__)
"""

#: Run as the job's user: detaches, takes an O_PATH descriptor on argv[1], sends it over a
#: unix socket to a peer that never receives it, closes its own, prints its pid and waits:
#: the descriptor is in flight, named in no /proc entry, and holds the mount until the
#: process ends (the socket's queue goes with it).
_IN_FLIGHT = r"""
import array, os, socket, sys, time
os.setsid()
if os.fork():
    os._exit(0)
held, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
fd = os.open(sys.argv[1], os.O_PATH)
held.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
os.close(fd)
print(os.getpid(), flush=True)
os.close(1)
time.sleep(1000)
"""


def probe(path, uid, gid) -> str:
    r = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _PROBE, str(path)],
        user=uid,
        group=gid,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_another_user_can_neither_hold_nor_measure_a_buffers_node_mount(one_brick, tmp_path):
    """The round-4 attack: an O_PATH descriptor (or an 18 s statvfs probe) on another user's
    node mount, held across the job's end, kept post_run's unmount busy and the buffer's
    bricks for good, and showed the victim's usage; the server's mount in fs_root was as
    open. Now the job's directory on the node and the buffer's in fs_root are passable by
    its owner alone, so the other user stops at them."""
    top, workdir, env, store = one_brick
    script, node, device = running_job(workdir, env, store, tmp_path, 61)
    server = buffer_fs(workdir, store, 61)  # the server's mount (the same machine here)
    for mount in (node, server):
        assert probe(mount, OTHER_UID, OTHER_GID) == "PermissionError", mount
        assert probe(mount, UID, GID).startswith("opened "), mount  # the owner reaches it
    ends_and_frees(env, store, script, 61, device)


def test_a_holder_no_process_shows_delays_teardown_only_while_it_lasts(one_brick, tmp_path):
    """The job's user hides a descriptor on the node mount in flight over a unix socket: no
    /proc entry names it, so nothing is killed. post_run's busy unmount detaches the mount
    lazily (nothing reaches the buffer by a path again); teardown fails in one line while
    the descriptor keeps the filesystem (the bricks do not open exclusively) and zeroes
    nothing; retries that are not due answer at once without a run; once the holder is gone
    the delete, run again by dacd when due, frees the brick. The owner's other processes are
    never stopped. Before (issue 45): post_run failed busy, the delete dropped the node mount
    from its list and failed for good, twice a second, stopping all the owner's processes."""
    top, workdir, env, store = one_brick
    script, node, device = running_job(workdir, env, store, tmp_path, 63)
    notes = owned(top / "notes", UID, GID, 0o700) / "bystander"
    py = [sys.executable, "-I", "-S", "-c"]
    bystander = started(py + [LEFTOVER, "bystander", str(notes)])
    holder = started(py + [_IN_FLIGHT, str(node)])
    try:
        assert alive(holder)
        slurm(env, "post_run", 63, "--job", str(script))
        assert not any(str(node) in line for line in mounted_anywhere(device))
        for attempt in (1, 2, 3):
            r = slurm(env, "teardown", 63, "--job", str(script), check=False)
            out = (r.stdout + r.stderr).strip()
            assert r.returncode != 0 and len(out.splitlines()) == 1, out
            assert f"{device}: the buffer's filesystem is still mounted" in out, out
            assert "nothing was zeroed or released" in out, out
            if attempt == 3:  # the runs so far failed: the next is not due yet
                assert re.search(r"\(failed [2-9] times; the next try is in [1-9]\d* s\)$", out)
        assert store.buffer("63") is not None and pools(env)["default"]["free_bricks"] == 0
        assert alive(holder), "a process holding nothing /proc shows was killed"
        kill([holder])  # dacd's next due run, or Slurm's teardown, finishes the delete now
        wait_for(
            lambda: slurm(env, "teardown", 63, "--job", str(script), check=False).returncode == 0,
            30,
            "a teardown after the holder ended",
            every=1,
        )
        assert store.buffer("63") is None and pools(env)["default"]["free_bricks"] == 1
        assert mounted_anywhere(device) == [] and exclusive(device)
        assert alive(bystander) and not notes.exists(), "the owner's process was stopped"
        next_buffer_builds(workdir, env, store, tmp_path, 64)
    finally:
        kill([holder, bystander])


def test_a_users_stuck_buffers_cost_that_user_and_leave_the_pool_to_others(open_dir, tmp_path):
    """Issue 45, item 2: one user's jobs each left a descriptor in flight, and their held
    buffers took the whole pool; everyone else's jobs pended. Now a buffer whose teardown
    fails counts against its owner (held_share, 25 % by default): that owner's next buffer
    is refused at setup in one line, another user's builds."""
    workdir = open_dir / "dac"
    env, store = up(workdir, servers=1, bricks=4)
    holder = 0
    try:
        script, node, device = running_job(workdir, env, store, tmp_path, 81)
        holder = started([sys.executable, "-I", "-S", "-c", _IN_FLIGHT, str(node)])
        slurm(env, "post_run", 81, "--job", str(script))
        r = slurm(env, "teardown", 81, "--job", str(script), check=False)
        assert r.returncode != 0 and "nothing was zeroed or released" in r.stdout, r.stdout
        assert pools(env)["default"]["free_bricks"] == 3
        with pytest.raises(AssertionError) as e:
            setup(env, tmp_path, 82, "512MiB")
        line = str(e.value).splitlines()[-1]
        assert "pool 'default': your buffers 81 still hold 512MiB, their teardown failing" in line
        assert "held_share in dac.yaml" in line and store.buffer("82") is None
        other, _, _ = running_job(workdir, env, store, tmp_path, 83, OTHER_UID, OTHER_GID)
        slurm(env, "teardown", 83, "--job", str(other))
        kill([holder])
        wait_for(
            lambda: slurm(env, "teardown", 81, "--job", str(script), check=False).returncode == 0,
            30,
            "the stuck buffer's teardown once its holder ended",
            every=1,
        )
        setup(env, tmp_path, 82, "512MiB")  # nothing held any more: the owner's next builds
        slurm(env, "teardown", 82, "--job", str(tmp_path / "job82.sh"))
        assert pools(env)["default"]["free_bricks"] == 4
    finally:
        kill([holder] if holder else [])
        down(workdir)
