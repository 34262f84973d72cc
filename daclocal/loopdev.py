"""Loop-file bricks: sparse files attached to loop devices, so dacd sees block devices.

Both the file and the device are root's alone (0600): whoever reads a brick reads every buffer
placed on it, the job's 0700 directories notwithstanding (docs/security.md)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from daccore.errors import AdminError

__all__ = ["attach", "detach", "backing_file"]


def attach(path: Path, size: int) -> str:
    """Create a sparse file of `size` bytes, root's and 0600, and attach it; returns /dev/loopN,
    made root's and 0600 too (udev's default is 0660 root:disk)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchown(fd, 0, 0)
        os.fchmod(fd, 0o600)  # whatever the umask, and a file left by an older up
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
    r = subprocess.run(["losetup", "--find", "--show", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        raise AdminError(
            f"cannot attach loop device for {path}: {r.stderr.strip()} "
            "(the local DAC needs root and free loop devices)"
        )
    device = r.stdout.strip()
    fd = os.open(device, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:  # through the fd: chmod(2) on a path would follow a link planted at it
        os.chown(f"/proc/self/fd/{fd}", 0, 0)
        os.chmod(f"/proc/self/fd/{fd}", 0o600)
    finally:
        os.close(fd)
    return device


def backing_file(device: str) -> str | None:
    """The file a loop device is attached to, or None when it is detached."""
    name = Path(device).name
    try:
        return Path(f"/sys/block/{name}/loop/backing_file").read_text().strip()
    except OSError:
        return None


def detach(device: str, expected_file: Path) -> None:
    """Detach `device` only if it still points at `expected_file` (never someone else's)."""
    backing = backing_file(device)
    if backing is None or Path(backing) != Path(expected_file):
        return
    r = subprocess.run(["losetup", "--detach", device], capture_output=True, text=True)
    if r.returncode != 0 and backing_file(device) is not None:
        raise AdminError(f"cannot detach {device}: {r.stderr.strip()}")
