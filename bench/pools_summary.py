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
from common import etcd_store, host_records, p99, percentiles, pool_record, steal_meter, verdict  # noqa: E402

from daccore.etcd.types import put_op  # noqa: E402
from daccore.records.models import BrickClaim  # noqa: E402
from daccore.rules.inventory import summarize  # noqa: E402

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
        number = int(h.name.removeprefix("dac"))
        if number % 100 == 1:
            store.set_drained(h.name, True)
        ops = [] if number % 100 == 2 else [put_op(k.alive_key(h.name), "")]  # 1 % down
        ops += [
            put_op(k.claim(b.pool, h.name, b.name), claim)
            for b in h.bricks
            if rng.random() < CLAIMED
        ]
        store.client.txn([], ops)
        return sum(op.key.startswith(k.claims) for op in ops)

    with ThreadPoolExecutor(8) as pool:
        return sum(pool.map(one, hosts))


def main() -> int:
    with etcd_store() as store:
        t = time.perf_counter()
        claims = populate(store)
        print(
            f"populated {HOSTS} hosts x {BRICKS} bricks (10 down, 10 drained), {claims} claims "
            f"({claims / HOSTS / BRICKS:.0%}) in {time.perf_counter() - t:.1f}s"
        )
        cpu = steal_meter()
        samples = []
        for _ in range(60):
            t = time.perf_counter()
            (s,) = summarize(store.summary_inventory())
            samples.append((time.perf_counter() - t) * 1000)
        assert (s.hosts_up, s.hosts_down, s.hosts_drained) == (990, 10, 10), s
        assert [s] == summarize(store.inventory())  # the counted read agrees with the full one
        samples = samples[5:]  # first calls open connections and warm caches
        print(f"pools summary in-process: {percentiles(samples)} ({cpu()})")
        full = []
        for _ in range(10):
            t = time.perf_counter()
            store.inventory()
            full.append((time.perf_counter() - t) * 1000)
        print(f"full inventory (placement's read), for reference: {percentiles(full)}")
    return verdict("p99", p99(samples), BUDGET_MS)


if __name__ == "__main__":
    sys.exit(main())
