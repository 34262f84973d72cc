"""Sampled placement (issue 20): what an allocation costs etcd for each sample size.

One etcd (TLS, client certificates, RBAC), 1,000 hosts x 24 bricks registered and alive, and
10,000 live buffers written as bench/scale.py writes them (~70 % of the bricks claimed); then,
for each number of hosts counted (`allocator.SAMPLE_HOSTS`; "all" counts every host, as
before sampling), allocations one at a time through gRPC as `setup` makes them, each deleted
again so every round starts from the same pool. Prints per allocation: wall time, etcd's
CPU and the caller's, transactions, and how many were widened to every host.

    .venv/bin/python bench/placement.py                       # ~2 min
    .venv/bin/python bench/placement.py --samples 32 64 all --allocations 500
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import p99, steal_meter  # noqa: E402
from scale import SEED_JOBS, TIB, UID, cpu_s, host_name, seed, sizes, write_config  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--servers", type=int, default=1000)
    p.add_argument("--bricks", type=int, default=24)
    p.add_argument("--buffers", type=int, default=10000)
    p.add_argument("--allocations", type=int, default=300)
    p.add_argument("--samples", nargs="+", default=["16", "32", "64", "100", "200", "all"])
    args = p.parse_args()

    from daccore.records.models import Buffer, BufferRequest
    from daccore.rules import allocator
    from daccore.services.buffers import allocate_buffer
    from daccore.settings.config import load_config
    from daccore.store import Store
    from dacd.registration import host_record, pool_records
    from daclocal.etcd_server import EtcdServer

    stolen = steal_meter()
    with tempfile.TemporaryDirectory(prefix="dac-placement-") as d:
        work = Path(d)
        server = EtcdServer(work / "etcd").start()
        try:
            write_config(work / "dac.yaml", server.settings(), args.servers, args.bricks)
            config = load_config(str(work / "dac.yaml"), env={})
            admin = Store.from_settings(config.etcd, transport="grpc", role="admin")
            for pool in pool_records(config):
                admin.ensure_pool(pool)
            for h in range(args.servers):
                admin.register_host(host_record(host_name(h), config.hosts[host_name(h)]))
                admin.client.put(admin.keys.alive_key(host_name(h)), "")
            held = seed(admin, config, args.buffers, random.Random(20))
            print(
                f"{args.servers} hosts x {args.bricks} bricks, {args.buffers} buffers "
                f"holding {held} bricks ({held / args.servers / args.bricks:.0%})"
            )
            slurm = Store.from_settings(config.etcd, transport="grpc", role="slurm")
            txns = [0]
            real = slurm.client.txn

            def counted(*a, **kw):
                txns[0] += 1
                return real(*a, **kw)

            slurm.client.txn = counted  # type: ignore[method-assign]  # counting txns
            real_rest = slurm.count_rest
            widened = [0]

            def count_rest(*a, **kw):
                widened[0] += 1
                return real_rest(*a, **kw)

            slurm.count_rest = count_rest  # type: ignore[method-assign]  # counting widenings
            job = SEED_JOBS * 2
            for size in args.samples:
                allocator.SAMPLE_HOSTS = 10**9 if size == "all" else int(size)
                rng = random.Random(size)
                wall, made = [], []
                txns[0] = widened[0] = 0
                cpu0, mine0 = cpu_s(server.pid), time.process_time()
                for n in sizes(args.allocations, rng):
                    job += 1

                    def make(allocation, job=job, n=n):
                        return Buffer(
                            name=str(job),
                            owner_uid=UID,
                            owner_gid=UID,
                            job_id=job,
                            request=BufferRequest(capacity=n * TIB, pool="default"),
                            allocation=allocation,
                            created_at=time.time(),
                        )

                    t0 = time.perf_counter()
                    made.append(
                        allocate_buffer(slurm, make, capacity=n * TIB, pool="default", rng=rng)
                    )
                    wall.append((time.perf_counter() - t0) * 1000)
                etcd_ms = (cpu_s(server.pid) - cpu0) * 1000 / len(wall)
                mine_ms = (time.process_time() - mine0) * 1000 / len(wall)
                print(
                    f"sample {size:>4}: p50 {statistics.median(wall):5.1f} ms, p99 "
                    f"{p99(wall):5.1f} ms a placement; CPU: etcd {etcd_ms:5.1f} ms, the "
                    f"caller {mine_ms:5.1f} ms; "
                    f"{txns[0] / len(wall):.1f} transactions each (the claim's included); "
                    f"{widened[0]} of {len(wall)} widened"
                )
                for buf, rev in made:
                    admin.delete_buffer(buf.name, rev)
        finally:
            server.stop()
    print(stolen())
    return 0


if __name__ == "__main__":
    sys.exit(main())
