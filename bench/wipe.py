"""Measure: the cost of teardown's wipe (blkdiscard --zeroout, BLKZEROOUT) per GiB of brick.

A loop device over a sparse file, filled with data so the zeroing has real extents to drop,
then zeroed as dac_local's delete does; prints seconds per GiB for the zero-out and, for
comparison, for writing zeroes. No budget: the figure goes into docs/performance.md.

    .venv/bin/python bench/wipe.py [GiB]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
from daclocal import loopdev  # noqa: E402

GiB = 1 << 30


def fill(device: str, size: int) -> None:
    chunk = os.urandom(4 << 20)
    fd = os.open(device, os.O_WRONLY)
    try:
        for _ in range(size // len(chunk)):
            os.write(fd, chunk)
        os.fsync(fd)
    finally:
        os.close(fd)


def timed(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> None:
    gib = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        path = Path(d) / "brick.img"
        device = loopdev.attach(path, gib * GiB)
        try:
            fill(device, gib * GiB)
            zeroout = timed(["blkdiscard", "--zeroout", device])
            allocated = os.stat(path).st_blocks * 512
            fill(device, gib * GiB)
            written = timed(
                [
                    "dd",
                    "if=/dev/zero",
                    f"of={device}",
                    "bs=4M",
                    "oflag=direct",
                    f"count={gib * 256}",
                ]
            )
            with open(device, "rb") as f:
                assert not any(f.read(4 << 20)), "zeroed device still holds data"
        finally:
            loopdev.detach(device, path)
    print(
        f"blkdiscard --zeroout: {zeroout / gib:.3f} s/GiB on a loop device "
        f"({gib} GiB; the backing file keeps {allocated >> 20} MiB allocated, as unwritten "
        "extents that read as zeroes)"
    )
    print(f"writing zeroes (dd oflag=direct): {written / gib:.3f} s/GiB")


if __name__ == "__main__":
    main()
