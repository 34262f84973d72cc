"""Budget: the `pools` summary over 1,000 hosts x 24 bricks with 30 % claimed, in etcd, <= 100 ms.

Measures `summarize(store.summary_inventory())`: one read-only transaction for pools, the
per-host capacity index, alive keys and claims at one revision, then the counting. For
reference it also times the full `store.inventory()` that placement reads.

    .venv/bin/python bench/pools_summary.py
"""

from __future__ import annotations

import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import etcd_store, host_records, p99, percentiles, pool_record, verdict  # noqa: E402

from daccore.etcd import put_op  # noqa: E402
from daccore.inventory import summarize  # noqa: E402
from daccore.models import BrickClaim  # noqa: E402

BUDGET_MS = 100.0
HOSTS, BRICKS, CLAIMED = 1000, 24, 0.30


def populate(store) -> int:
    store.ensure_pool(pool_record())
    hosts = host_records(HOSTS, BRICKS)
    rng = random.Random(3)
    claim = BrickClaim(buffer="bench").model_dump_json()
    k = store.keys

    def one(h):
        store.register_host(h)  # the host record and its capacity index, as dacd writes them
        ops = [put_op(k.alive_key(h.name), "")]
        ops += [put_op(k.claim(h.name, b.name), claim) for b in h.bricks
                if rng.random() < CLAIMED]
        store.client.txn([], ops)
        return len(ops) - 1
    with ThreadPoolExecutor(8) as pool:
        return sum(pool.map(one, hosts))


def main() -> int:
    with etcd_store() as store:
        t = time.perf_counter()
        claims = populate(store)
        print(f"populated {HOSTS} hosts x {BRICKS} bricks, {claims} claims "
              f"({claims / HOSTS / BRICKS:.0%}) in {time.perf_counter() - t:.1f}s")
        samples = []
        for _ in range(60):
            t = time.perf_counter()
            (s,) = summarize(store.summary_inventory())
            samples.append((time.perf_counter() - t) * 1000)
        assert (s.total, s.used, s.hosts_up) == (HOSTS * BRICKS, claims, HOSTS), s
        samples = samples[5:]  # first calls open connections and warm caches
        print(f"pools summary in-process: {percentiles(samples)}")
        full = []
        for _ in range(10):
            t = time.perf_counter()
            store.inventory()
            full.append((time.perf_counter() - t) * 1000)
        print(f"full inventory (placement's read), for reference: {percentiles(full)}")
    return verdict("p99", p99(samples), BUDGET_MS)


if __name__ == "__main__":
    sys.exit(main())
