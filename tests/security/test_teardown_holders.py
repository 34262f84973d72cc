"""Issue 30, "teardown always ends": a job's leftover processes, however started, cannot keep
its buffer past teardown, and no brick is zeroed or released while any mount of it is left in
any mount namespace. Real dacd, the real local playbooks through ansible-runner, a loop-device
brick (one server, one brick: every buffer lands on the same brick), uid 1234 the job's user,
uid 5678 a second user."""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clitools import pools, setup, slurm
from leftovers import LEFTOVER as _LEFTOVER
from security.staging_dac import GID, OTHER_GID, OTHER_UID, UID, buffer_fs, owned

#: post_run and teardown together, while the job's leftovers fork and hold the buffer; each
#: Slurm call is a dacctl process and an Ansible run (~2 s each on a loaded 2-core machine)
BOUND = 30


def as_user(argv, uid=UID, gid=GID) -> subprocess.Popen:
    return subprocess.Popen(
        argv,
        user=uid,
        group=gid,
        extra_groups=[gid],
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )


#: Run by root in a mount namespace of its own: every mount under /tmp but the test's own top
#: ($1) detached there, then `$4...` as uid $2, gid $3. A user's namespace made from it copies
#: this test's buffer alone, not those of the other test lines running meanwhile: a locked copy
#: of theirs would pin their devices past their teardowns ("not the job's user's alone").
_APART = """
awk '{print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
  case "$m" in "$1"|"$1"/*) continue;; /tmp/*) umount -l "$m" || true;; esac
done
uid=$2 gid=$3; shift 3
exec setpriv --reuid "$uid" --regid "$gid" --groups "$gid" -- "$@"
"""


def apart(top: Path, argv, uid=UID, gid=GID) -> int:
    """The pid printed by `argv` (a user's namespace maker) run detached as uid, gid, from a
    mount namespace holding no other test line's mounts."""
    inner = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _APART, "sh"]
    return started(["setsid", "-f", *inner, str(top), str(uid), str(gid), *argv], 0, 0)


def started(argv, uid=UID, gid=GID) -> int:
    """The pid the user's detached process prints."""
    proc = as_user(argv, uid, gid)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.stdout.close()
    proc.wait(timeout=10)
    assert line.strip().isdigit(), argv
    return int(line)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def mounted_anywhere(device: str) -> list[str]:
    """Every mount of `device` any process's mount namespace shows."""
    rdev = os.stat(device).st_rdev
    ids = f"{os.major(rdev)}:{os.minor(rdev)}"
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
        except OSError:
            continue
        out += [
            f"{pid}: {line}" for line in lines if line.split()[2] == ids or f" {device} " in line
        ]
    return out


def exclusive(device: str) -> bool:
    try:
        os.close(os.open(device, os.O_RDONLY | os.O_EXCL))
        return True
    except OSError:
        return False


def nodes_file(tmp_path) -> str:
    f = tmp_path / "nodes"
    f.write_text("node1\n")
    return str(f)


def running_job(workdir, env, store, tmp_path, job, uid=UID, gid=GID):
    """A job's buffer set up and mounted on node1; (script, node's striped dir, device)."""
    script = setup(env, tmp_path, job, "512MiB", uid=uid, gid=gid)
    slurm(env, "pre_run", job, "--job", str(script), "--nodehostnamefile", nodes_file(tmp_path))
    (device,) = [b.device for b in store.buffer(str(job)).record.allocation.bricks]
    return script, workdir / "nodes" / "node1" / str(job) / "striped", device


def ends_and_frees(env, store, script, job, device) -> float:
    """post_run and teardown, timed; then the brick is free, mounted nowhere, released."""
    t = time.monotonic()
    slurm(env, "post_run", job, "--job", str(script))
    slurm(env, "teardown", job, "--job", str(script))
    took = time.monotonic() - t
    assert store.buffer(str(job)) is None and pools(env)["default"]["free_bricks"] == 1
    assert mounted_anywhere(device) == [] and exclusive(device)
    return took


def next_buffer_builds(workdir, env, store, tmp_path, job) -> None:
    """The other user's next buffer on the same brick: mkfs, mount, data, teardown."""
    script, node, _ = running_job(workdir, env, store, tmp_path, job, OTHER_UID, OTHER_GID)
    r = subprocess.run(
        ["sh", "-c", 'echo next > "$1"/f', "sh", str(node)],
        user=OTHER_UID,
        group=OTHER_GID,
        extra_groups=[],
        capture_output=True,
    )
    assert r.returncode == 0, r.stderr
    slurm(env, "teardown", job, "--job", str(script))
    assert store.buffer(str(job)) is None and pools(env)["default"]["free_bricks"] == 1


def test_teardown_ends_double_forked_holders_and_a_fork_loop_outside_the_buffer(
    one_brick, tmp_path
):
    top, workdir, env, store = one_brick
    script, node, device = running_job(workdir, env, store, tmp_path, 41)
    server = buffer_fs(workdir, store, 41) / "striped"
    py = [sys.executable, "-I", "-S", "-c", _LEFTOVER]
    notes = owned(top / "notes", UID, GID, 0o700) / "bystander"
    bystander = started(py + ["bystander", str(notes)])
    holders = [started(py + ["holder", str(node)]), started(py + ["holder", str(server)])]
    spawners = [started(py + ["spawner", str(node)]), started(py + ["spawner", str(server)])]
    try:
        time.sleep(0.5)  # the loops are running
        assert all(alive(p) for p in holders + spawners)
        took = ends_and_frees(env, store, script, 41, device)
        assert took < BOUND, f"teardown took {took:.1f}s"
        print(f"teardown with leftovers: {took:.1f}s")
        assert not any(alive(p) for p in holders)
        time.sleep(0.3)  # the spawners go on (they hold nothing) and reach nothing of it
        assert not os.path.exists(node) and not os.path.exists(server)
        # nothing of the user's was stopped (issue 45: it was, at every retry)
        assert alive(bystander) and not notes.exists()
        next_buffer_builds(workdir, env, store, tmp_path, 42)
    finally:
        kill(holders + spawners + [bystander])


def test_teardown_ends_the_users_own_namespaces_holding_the_buffer(one_brick, tmp_path):
    top, workdir, env, store = one_brick
    script, node, device = running_job(workdir, env, store, tmp_path, 43)
    elsewhere = owned(top / "elsewhere", UID, GID, 0o700)
    userns = ["unshare", "--user", "--map-root-user", "--mount", "--", "sh", "-c"]
    # the buffer bind-mounted elsewhere in the user's own namespace, cwd /
    bound = apart(
        top,
        userns
        + [
            'mount --bind "$1" "$2" && cd / && echo $$ && exec sleep 1000',
            "sh",
            str(node),
            str(elsewhere),
        ],
    )
    # a cwd and an open file in the buffer, inside such a namespace
    inside = apart(
        top, userns + ['cd "$1" && exec 3>held && echo $$ && exec sleep 1000', "sh", str(node)]
    )
    try:
        assert Path(f"/proc/{bound}/ns/mnt").resolve() != Path("/proc/self/ns/mnt").resolve()
        assert any(
            str(elsewhere) in line
            for line in Path(f"/proc/{bound}/mountinfo").read_text().splitlines()
        )
        took = ends_and_frees(env, store, script, 43, device)
        assert took < BOUND, f"teardown took {took:.1f}s"
        print(f"teardown with the user's namespaces: {took:.1f}s")
        assert not alive(bound) and not alive(inside)
        next_buffer_builds(workdir, env, store, tmp_path, 44)
    finally:
        kill([bound, inside])


def test_teardown_names_a_mount_left_in_another_users_namespace_and_releases_nothing(
    one_brick, tmp_path
):
    top, workdir, env, store = one_brick
    script, node, device = running_job(workdir, env, store, tmp_path, 45)
    fs = buffer_fs(workdir, store, 45)
    # another user's namespace made while the buffer is mounted holds a copy of its mounts
    # (locked: not even root can unmount it there); dac kills no one but the job's user
    # a mount of another test line's, which that namespace must not copy (see _APART)
    neighbour = Path(tempfile.mkdtemp(prefix="dac-neighbour-", dir="/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(neighbour)], check=True)
    other = apart(
        top,
        ["unshare", "--user", "--map-root-user", "--mount", "--", "sh", "-c"]
        + ["echo $$ && exec sleep 1000"],
        OTHER_UID,
        OTHER_GID,
    )
    held = Path(f"/proc/{other}/mountinfo").read_text()
    subprocess.run(["umount", str(neighbour)], check=True)
    neighbour.rmdir()
    assert str(fs) in held and str(neighbour) not in held
    # a daemon of root's started meanwhile with a private mount namespace: an unlocked copy,
    # which dac unmounts there (as propagation would on a host whose / is shared)
    daemon = started(
        [
            "setsid",
            "-f",
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            "echo $$ && exec sleep 1000",
        ],
        0,
        0,
    )
    try:
        slurm(env, "post_run", 45, "--job", str(script))
        r = slurm(env, "teardown", 45, "--job", str(script), check=False)
        out = (r.stdout + r.stderr).strip()
        assert r.returncode != 0 and len(out.splitlines()) == 1, out
        assert f"{device}: the buffer's filesystem is still mounted" in out
        assert f"(pid {other}; uid {OTHER_UID}) has it mounted at {fs}" in out
        assert "an admin must end them" in out and "nothing was zeroed or released" in out
        assert alive(other) and alive(daemon) and f"pid {daemon};" not in out
        assert str(fs) not in Path(f"/proc/{daemon}/mountinfo").read_text()
        assert store.buffer("45") is not None and pools(env)["default"]["free_bricks"] == 0
        blkid = subprocess.run(
            ["blkid", "-p", "-o", "value", "-s", "TYPE", device], capture_output=True, text=True
        )
        assert blkid.stdout.strip() == "xfs"  # not zeroed under the mount left

        kill([other])  # Slurm's next teardown finishes once that namespace is gone
        slurm(env, "teardown", 45, "--job", str(script))
        assert store.buffer("45") is None and pools(env)["default"]["free_bricks"] == 1
        assert mounted_anywhere(device) == [] and exclusive(device)
        assert alive(daemon)  # root's daemon is never killed
        next_buffer_builds(workdir, env, store, tmp_path, 46)
    finally:
        kill([other, daemon])


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_teardown_of_a_plain_holder_stops_nothing_else_of_the_users(one_brick, tmp_path):
    """A leftover holder is killed without stopping the user's other processes on the host
    (the local DAC's servers are the machine everything else runs on)."""
    top, workdir, env, store = one_brick
    script, node, device = running_job(workdir, env, store, tmp_path, 47)
    notes = owned(top / "notes", UID, GID, 0o700) / "bystander"
    py = [sys.executable, "-I", "-S", "-c", _LEFTOVER]
    bystander = started(py + ["bystander", str(notes)])
    holder = started(py + ["holder", str(node)])
    try:
        ends_and_frees(env, store, script, 47, device)
        assert not alive(holder)
        assert alive(bystander) and _state(bystander) not in "Tt"
        assert not notes.exists(), "the user's process that held nothing was stopped"
    finally:
        kill([holder, bystander])
