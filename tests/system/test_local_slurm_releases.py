"""The local DAC's Slurm releases in one workdir, one after another, and a chroot cache the
release's SlurmUser cannot enter (issue 32, the local DAC's two faults)."""

import os
import subprocess
import tempfile
import time
from pathlib import Path

from clitools import run

from daclocal.releases import ensure_chroot, release


def _up(workdir, release, env=None):
    return run(
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
        "512MiB",
        "--slurm-nodes",
        "1",
        "--slurm-release",
        release,
        env=env,
        check=False,
        timeout=900,
    )


def test_22_05_comes_up_where_26_05_ran_before(open_dir):
    """`down` keeps the workdir's Slurm configuration; 26.05's cgroup.conf
    (CgroupPlugin=disabled, a plugin 22.05 does not have) must not stop 22.05 there."""
    try:
        for release in ("26.05", "22.05"):
            r = _up(open_dir, release)
            assert r.returncode == 0, (release, r.stdout, r.stderr)
            assert f"Slurm {release} 1 nodes" in r.stdout, r.stdout
            run("dacctl", "local", "down", "--workdir", str(open_dir))
        assert not (open_dir / "slurm" / "etc" / "cgroup.conf").exists()
    finally:
        run("dacctl", "local", "down", "--workdir", str(open_dir), check=False)


def test_a_chroot_cache_slurm_cannot_enter_is_refused_up_front_in_one_line(open_dir):
    """Slurm 24.11 runs as slurm and loads its plugins from the chroot: a 0700 cache ended as
    `slurmctld exited (status 1)`. Refused before anything starts; the fix it names works.
    The cache holds the built 24.11 chroot (bound in from the usual cache: no second build)."""
    cache = tempfile.mkdtemp(prefix="dac-cache-")  # 0700, root's
    chroot = os.path.join(cache, "slurm-24.11")
    os.mkdir(chroot)
    subprocess.run(["mount", "--bind", str(ensure_chroot(release("24.11"))), chroot], check=True)
    try:
        env = {**os.environ, "DAC_LOCAL_CACHE": cache}
        r = _up(open_dir, "24.11", env)
        assert (r.returncode, r.stdout) == (2, "")  # an admin's to fix
        assert r.stderr.splitlines() == [
            f"dacctl: admin error: Slurm 24.11 runs as slurm, who cannot enter the chroot "
            f"cache {cache} (mode 0700): chmod o+x {cache}, or set DAC_LOCAL_CACHE to a "
            "directory every user may enter"
        ], r.stderr
        assert not (open_dir / "state.json").exists()  # nothing started
        os.chmod(cache, 0o711)
        r = _up(open_dir, "24.11", env)
        assert r.returncode == 0 and "Slurm 24.11 1 nodes" in r.stdout, (r.stdout, r.stderr)
    finally:
        run("dacctl", "local", "down", "--workdir", str(open_dir), check=False)
        subprocess.run(["umount", chroot], check=True)
        os.rmdir(chroot)  # rmdir, never a tree removal: that would reach through a mount left
        os.remove(os.path.join(cache, ".slurm-24.11.lock")) if os.path.exists(
            os.path.join(cache, ".slurm-24.11.lock")
        ) else None
        os.rmdir(cache)


def test_a_chroot_daemon_holds_no_other_local_dacs_mount(tmp_path):
    """A chroot release's daemon rbinds /tmp into its own mount namespace; on a host whose / is
    not a shared mount (this machine, CI's) the copies of another local DAC's buffer mounts
    there never see their unmounts and pinned those buffers' devices past teardown ("still
    mounted after its unmount"). Only the daemon's own DAC's mounts stay."""
    from daclocal.releases import daemon_argv

    rel = release("24.11")
    ensure_chroot(rel)
    foreign = tempfile.mkdtemp(prefix="dac-foreign-", dir="/tmp")
    own = tempfile.mkdtemp(prefix="dac-own-", dir="/tmp")
    image = os.path.join(foreign, "img")
    subprocess.run(["truncate", "-s", "64M", image], check=True)
    dev = subprocess.run(
        ["losetup", "-f", "--show", image], capture_output=True, text=True, check=True
    ).stdout.strip()
    mnt, mine = os.path.join(foreign, "mnt"), os.path.join(own, "mnt")
    proc = None
    try:
        subprocess.run(["mkfs.ext4", "-q", dev], check=True)
        os.mkdir(mnt)
        os.mkdir(mine)
        subprocess.run(["mount", dev, mnt], check=True)
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", mine], check=True)
        proc = subprocess.Popen(daemon_argv(rel, Path(own), ["/bin/sleep", "30"]))
        seen = ""
        for _ in range(100):  # its namespace made, chrooted: its mounts settled
            seen = open(f"/proc/{proc.pid}/mountinfo").read()
            if os.readlink(f"/proc/{proc.pid}/root") != "/":
                break
            time.sleep(0.05)
        assert os.readlink(f"/proc/{proc.pid}/root") != "/"
        assert foreign not in seen  # another DAC's buffer: not held
        assert mine in seen  # its own DAC's: kept
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        subprocess.run(["umount", "-l", mnt], capture_output=True)
        subprocess.run(["umount", "-l", mine], capture_output=True)
        subprocess.run(["losetup", "-d", dev], capture_output=True)
        subprocess.run(["rm", "-rf", foreign, own])
