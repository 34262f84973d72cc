"""Loop-file bricks: sparse files attached to loop devices, so dacd sees block devices."""

from __future__ import annotations

import subprocess
from pathlib import Path

from daccore.errors import AdminError

__all__ = ["attach", "detach", "backing_file"]


def attach(path: Path, size: int) -> str:
    """Create a sparse file of `size` bytes and attach it; returns /dev/loopN."""
    with open(path, "wb") as f:
        f.truncate(size)
    r = subprocess.run(["losetup", "--find", "--show", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        raise AdminError(f"cannot attach loop device for {path}: {r.stderr.strip()} "
                         "(the local DAC needs root and free loop devices)")
    return r.stdout.strip()


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
