"""Budget: 200 concurrent allocation transactions (20 workers) against one etcd, asking for
more bricks than exist: every brick claimed at most once (checked by reading every claim key
afterwards), every loser told "no capacity" (CapacityError) or retried cleanly.

    .venv/bin/python bench/alloc_storm.py
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import TIB, etcd_store, host_records, pool_record  # noqa: E402

from daccore.errors import CapacityError  # noqa: E402
from daccore.records.models import Buffer, BufferRequest  # noqa: E402
from daccore.services.buffers import allocate_buffer  # noqa: E402
from daccore.store import AllocationConflict, Store  # noqa: E402

HOSTS, BRICKS, REQUESTS, WORKERS = 10, 10, 200, 20


def main() -> int:
    with etcd_store() as store:
        store.ensure_pool(pool_record("across_servers"))
        for h in host_records(HOSTS, BRICKS):
            store.register_host(h)
            store.client.put(store.keys.alive_key(h.name), "")
        conflicts: Counter[str] = Counter()
        lock = threading.Lock()
        original = Store.create_buffer

        def counting_create(self, buffer):
            try:
                return original(self, buffer)
            except AllocationConflict:
                with lock:
                    conflicts["conflict"] += 1
                raise

        # count the retries the storm causes
        Store.create_buffer = counting_create  # type: ignore[method-assign]

        def request(i: int):
            rng = random.Random(i)
            bricks = rng.randint(1, 3)

            def make(allocation):
                return Buffer(
                    name=f"job{i}",
                    owner_uid=1000,
                    owner_gid=1000,
                    job_id=i,
                    request=BufferRequest(capacity=bricks * TIB, pool="default"),
                    allocation=allocation,
                )

            try:
                buf, _ = allocate_buffer(
                    store, make, capacity=bricks * TIB, pool="default", rng=rng
                )
                return ("won", buf)
            except CapacityError as e:
                return ("no capacity", str(e))

        start = time.perf_counter()
        with ThreadPoolExecutor(WORKERS) as pool:
            results = list(pool.map(request, range(REQUESTS)))
        wall = time.perf_counter() - start

        claims = store.claims()  # every claim key, read back
        buffers = store.buffers()
        won = [r[1] for r in results if r[0] == "won"]
        lost = [r[1] for r in results if r[0] == "no capacity"]
        allocated = Counter((b.host, b.brick) for buf in won for b in buf.allocation.bricks)
        problems = []
        if any(n > 1 for n in allocated.values()):
            problems.append("a brick appears in two allocations")
        for buf in won:
            for b in buf.allocation.bricks:
                if claims.get((b.host, b.brick)) != buf.name:
                    problems.append(
                        f"{buf.name}: claim on {b.host}/{b.brick} is "
                        f"{claims.get((b.host, b.brick))!r}"
                    )
        if len(claims) != sum(allocated.values()):
            problems.append(f"{len(claims)} claim keys for {sum(allocated.values())} bricks")
        if set(buffers) != {b.name for b in won}:
            problems.append("buffer records differ from the winners")
        if len(won) + len(lost) != REQUESTS:
            problems.append("some request neither won nor was refused")
        print(
            f"{REQUESTS} requests of 1-3 bricks, {WORKERS} workers, {HOSTS * BRICKS} bricks: "
            f"{len(won)} buffers created holding {len(claims)} bricks, {len(lost)} refused "
            f'(e.g. "{lost[0] if lost else ""}"), '
            f"{conflicts['conflict']} claim conflicts retried, "
            f"{wall:.1f}s wall"
        )
        for p in problems[:10]:
            print("PROBLEM:", p)
        ok = not problems and len(claims) <= HOSTS * BRICKS
        print(
            "every brick claimed at most once, every loser refused cleanly: "
            f"{'PASS' if ok else 'FAIL'}"
        )
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
