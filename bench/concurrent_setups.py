"""Budget: 50 concurrent setups on 2 dacd (local DAC, 4 bricks of 512 MiB each): every one ready
or cleanly refused for capacity, 0 bricks double-claimed, all torn down after, <= 60 s wall.

All 50 `dacctl --function setup` calls start at once, each for a one-brick buffer, as Slurm's
stage-in would; 8 must build a real xfs filesystem and return 0, the other 42 must fail with a
one-line capacity refusal. The claims in etcd are then checked against every buffer's
allocation, and 50 teardowns run at once; the bricks must all be free at the end.

    .venv/bin/python bench/concurrent_setups.py
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import local_dac, many_jobs, steal_meter  # noqa: E402

from daccore.settings.config import load_config  # noqa: E402
from daccore.store import Store  # noqa: E402

BUDGET_S = 60.0
JOBS = 50
BRICKS = 8
REFUSALS = ("no host in pool 'default' has", "pool 'default' has", "pool 'default' is too busy")


def main() -> int:
    with local_dac(servers=2, bricks_per_server=4) as (state, env, work):
        store = Store.from_settings(
            load_config(str(state.config_path), env={}).etcd, transport="http"
        )
        cpu = steal_meter()
        start = time.perf_counter()
        setups = many_jobs(env, work, "setup", JOBS)
        setup_s = time.perf_counter() - start
        ready = [r for r in setups if r.returncode == 0]
        refused = [
            r
            for r in setups
            if r.returncode == 1 and r.stdout.startswith(REFUSALS) and r.stdout.count("\n") == 1
        ]
        other = [r for r in setups if r not in ready and r not in refused]
        buffers = store.buffers()
        claims = store.claims()
        held = Counter((b.host, b.brick) for buf in buffers.values() for b in buf.allocation.bricks)
        doubles = [k for k, n in held.items() if n > 1]
        claims_agree = claims == {
            (b.host, b.brick): name for name, buf in buffers.items() for b in buf.allocation.bricks
        }
        teardown_start = time.perf_counter()
        teardowns = many_jobs(env, work, "teardown", JOBS)
        wall = time.perf_counter() - start
        teardown_s = time.perf_counter() - teardown_start
        failed_teardowns = [r for r in teardowns if r.returncode != 0]
        left = store.claims()
    print(
        f"setups: {len(ready)} ready, {len(refused)} refused for capacity, {len(other)} other "
        f"in {setup_s:.1f} s; teardowns: {JOBS - len(failed_teardowns)} ok in {teardown_s:.1f} s"
    )
    for r in other[:3] + failed_teardowns[:3]:
        print(
            "  unexpected: job", r.args[5], r.returncode, r.stdout.strip(), r.stderr.strip()[-300:]
        )
    print(
        f"bricks double-claimed: {len(doubles)}; claims agree with allocations: {claims_agree}; "
        f"claims left after teardown: {len(left)}"
    )
    print(cpu())
    ok = (
        len(ready) == BRICKS
        and len(refused) == JOBS - BRICKS
        and not other
        and not doubles
        and claims_agree
        and not failed_teardowns
        and not left
        and wall <= BUDGET_S
    )
    print(f"wall {wall:.1f} s, budget {BUDGET_S:.0f} s: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
