"""Budget: allocator over 1,000 hosts x 24 bricks with 30 % claimed, p99 decision <= 50 ms.

Each decision is timed with the garbage collector paused, as
`daccore.services.buffers.allocate_buffer` runs it (see daccore/gcpause.py for why).

    .venv/bin/python bench/allocator.py
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import TIB, p99, percentiles, steal_meter, synthetic_inventory, verdict  # noqa: E402

from daccore.gcpause import gc_paused  # noqa: E402
from daccore.rules.allocator import place  # noqa: E402

BUDGET_MS = 50.0


def main() -> int:
    worst = 0.0
    rng = random.Random(7)
    cpu = steal_meter()
    for placement in ("across_servers", "single_host"):
        inv = synthetic_inventory(1000, 24, 0.30, placement)
        for bricks in (1, 4, 16) if placement == "single_host" else (1, 16, 256, 2048):
            samples = []
            for _ in range(200):
                with gc_paused():
                    t = time.perf_counter()
                    picked = place(inv, bricks * TIB, "default", rng=rng)
                    samples.append((time.perf_counter() - t) * 1000)
                assert len(picked) == bricks
            worst = max(worst, p99(samples))
            print(f"{placement:15s} {bricks:5d} bricks: {percentiles(samples)}")
    print(cpu())
    return verdict("worst p99", worst, BUDGET_MS)


if __name__ == "__main__":
    sys.exit(main())
