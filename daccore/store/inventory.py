"""What placement and the summaries read: pools, hosts, liveness and claims at one revision,
as few and as small reads as each caller can do with (`daccore.rules.inventory` decides over
them)."""

from __future__ import annotations

import json
from collections import namedtuple

from daccore.etcd.types import KV, Op, range_op
from daccore.gcpause import gc_paused
from daccore.records.keys import Keys, prefix_end
from daccore.rules.inventory import (
    BrickInfo,
    ClaimCounts,
    Inventory,
    parse_hosts,
    parse_pools,
    views_of,
)
from daccore.store.base import _MAX_TXN_OPS, _claimant, _named
from daccore.store.work import WorkKeys

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from typing import Callable, Iterable, Sequence

    from daccore.etcd.types import EtcdApi
    from daccore.rules.inventory import PoolInfo
    from daccore.settings.cache import Json

__all__ = ["InventoryReads", "PlacementView"]

#: What placement reads first: pools, free bricks per host of one pool, at one revision, and
#: the buffers whose chunked allocation was cut short. `uncounted`: the candidate hosts left
#: out of a sampled count, with their bricks in the pool (`Store.count_rest`).
PlacementView = namedtuple(
    "PlacementView", "pools free revision dead_intents uncounted", defaults=((),)
)


class InventoryReads(WorkKeys):
    """Owns the reads over pools, capacity indexes, alive keys and claim counts: `inventory`
    (every record, for `dacctl hosts` and tests), `summary_inventory` and
    `host_summary_inventory` (counts), `placement_view`, `count_rest` and `free_bricks_on`
    (a setup's placement); and the cache of capacity records and alive keys they share."""

    def __init__(self, client: EtcdApi, prefix: str = "/dac/v1/"):
        super().__init__(client, prefix)
        self._views: Json | None = None  # _host_views' cache

    def inventory(self, claim_owners: bool = False) -> Inventory:
        """Pools, full host records, liveness and every claim, at one revision: for placement."""
        k = self.keys
        with gc_paused():
            r = self.client.txn(
                [],
                [  # one read-only txn: every range at the same revision
                    range_op(k.pools, prefix_end(k.pools)),
                    range_op(k.hosts, prefix_end(k.hosts)),
                    range_op(k.alive, prefix_end(k.alive), keys_only=True),
                    range_op(k.claims, prefix_end(k.claims), keys_only=not claim_owners),
                    range_op(k.intents, prefix_end(k.intents), keys_only=True),
                    range_op(k.intent_leases, prefix_end(k.intent_leases), keys_only=True),
                ],
            )
            pools, hosts, alive, claims, intents, leases = r.ranges
            owner: Callable[[KV], str] = (
                (lambda kv: _claimant(kv) or "?") if claim_owners else (lambda kv: "")
            )
            inv = Inventory.from_json(
                _named(pools, k.pools),
                {Keys.last(kv.key, k.alive) for kv in alive},
                claims={k.parse_claim(kv.key): owner(kv) for kv in claims},
                hosts=_named(hosts, k.hosts),
                revision=r.revision,
            )
            live = {Keys.last(kv.key, k.intent_leases) for kv in leases}
            inv.dead_intents = sorted(
                n for kv in intents if (n := Keys.last(kv.key, k.intents)) not in live
            )
            return inv

    def summary_inventory(self) -> Inventory:
        """Enough to `summarize`, several times cheaper than `inventory` on a big site: the
        capacity indexes instead of the host records, and claims counted by etcd, per pool and
        for each down or drained host, instead of listed. Two reads, both at one revision."""
        k = self.keys
        with gc_paused():
            (pools,), capacities, alive, revision = self._host_views(
                [range_op(k.pools, prefix_end(k.pools))]
            )
            pool_infos = parse_pools(_named(pools, k.pools))
            views = views_of(capacities, alive)
            wanted = [(p, None) for p in pool_infos] + [
                (p, v.name)
                for v in views
                if not v.alive or v.drained
                for p in v.pools
                if p in pool_infos
            ]
            counts = ClaimCounts()
            for start in range(0, len(wanted), _MAX_TXN_OPS):
                chunk = wanted[start : start + _MAX_TXN_OPS]
                ops = []
                for pool, host in chunk:
                    prefix = k.host_claims(pool, host) if host else k.pool_claims(pool)
                    ops.append(
                        range_op(prefix, prefix_end(prefix), count_only=True, revision=revision)
                    )
                for (pool, host), n in zip(chunk, self.client.txn([], ops).counts, strict=True):
                    if host:
                        counts.per_host[(pool, host)] = n
                    else:
                        counts.per_pool[pool] = n
            return Inventory.of_counts(pool_infos, views, counts, revision)

    def _host_views(self, extra: list[Op]) -> tuple[Sequence[list[KV]], list[bytes], set[str], int]:
        """The ranges of `extra`, every capacity record and the live hosts' names, all at one
        revision; the capacity records and alive keys from the caller's cache when etcd says
        none changed since it was read: as many as before (counted) and none modified since
        (`min_mod_revision`): a put shows, a delete alone lowers the count. At 1,000 servers
        these 2,000 keys were most of `pools` (the gateway marshals each: ~20 ms) and read
        twice by every setup; the cache is a file in the caller's 0700 cache directory, as
        the config's is (daccore/settings/cache.py), and a copy in memory."""
        k = self.keys
        cached = self._views_cache()
        n = len(extra)
        if cached is not None and extra and extra[0].key == k.pools:
            since = cached["revision"] + 1
            r = self.client.txn(
                [],
                extra
                + [
                    range_op(k.capacities, prefix_end(k.capacities), count_only=True),
                    range_op(k.alive, prefix_end(k.alive), count_only=True),
                    range_op(
                        k.capacities,
                        prefix_end(k.capacities),
                        keys_only=True,
                        min_mod_revision=since,
                    ),
                    range_op(k.alive, prefix_end(k.alive), keys_only=True, min_mod_revision=since),
                ],
            )
            # the pools' revisions too: a cache of another etcd behind the same endpoints
            # (a local DAC made anew) never passes for this one's
            if (
                (r.counts[n], r.counts[n + 1]) == (len(cached["capacity"]), len(cached["alive"]))
                and not r.ranges[n + 2]
                and not r.ranges[n + 3]
                and r.revision >= cached["revision"]
                and _fingerprint(r.ranges[0]) == cached.get("pools")
            ):
                return (
                    r.ranges[:n],
                    [v.encode() for v in cached["capacity"]],
                    set(cached["alive"]),
                    r.revision,
                )
            fresh = self.client.txn(
                [],
                [
                    range_op(k.capacities, prefix_end(k.capacities), revision=r.revision),
                    range_op(k.alive, prefix_end(k.alive), keys_only=True, revision=r.revision),
                ],
            )
            extra_ranges, (capacities, alive) = r.ranges[:n], fresh.ranges
        else:
            r = self.client.txn(
                [],
                extra
                + [
                    range_op(k.capacities, prefix_end(k.capacities)),
                    range_op(k.alive, prefix_end(k.alive), keys_only=True),
                ],
            )
            extra_ranges, (capacities, alive) = r.ranges[:n], r.ranges[n:]
        values = _named(capacities, k.capacities)
        names = {Keys.last(kv.key, k.alive) for kv in alive}
        if extra and extra[0].key == k.pools:
            self._save_views(
                {
                    "revision": r.revision,
                    "alive": sorted(names),
                    # a record not UTF-8 is no HostCapacity: views_of leaves
                    # it out, read from etcd or from here
                    "capacity": [v.decode(errors="replace") for v in values],
                    "pools": _fingerprint(extra_ranges[0]),
                }
            )
        return extra_ranges, values, names, r.revision

    def _views_file(self) -> str | None:
        from daccore.settings.cache import cache_dir

        d = cache_dir()
        if d is None:
            return None
        import hashlib

        ident = "\0".join([self.keys.root, *sorted(self.client.endpoints)])
        return f"{d}/views-{hashlib.sha1(ident.encode()).hexdigest()[:16]}.json"

    def _views_cache(self) -> Json | None:
        if self._views is not None:
            return self._views
        try:
            path = self._views_file()
            if path is None:
                return None
            with open(path, "rb") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            return None
        if not (
            isinstance(doc, dict)
            and isinstance(doc.get("revision"), int)
            and isinstance(doc.get("capacity"), list)
            and isinstance(doc.get("alive"), list)
        ):
            return None
        self._views = doc
        return doc

    def _save_views(self, doc: Json) -> None:
        self._views = doc
        try:
            path = self._views_file()
            if path is not None:
                from daccore.settings.cache import write_private_json

                write_private_json(path, doc)
        except OSError:
            pass  # a cache: the next call reads everything again

    def placement_view(
        self,
        pool: str,
        sample: Callable[[dict[str, PoolInfo], dict[str, int]], Iterable[str]] | None = None,
    ) -> PlacementView:
        """What placement needs to choose hosts (`allocator.plan`): the pools, and how many
        bricks of `pool` each live, undrained host has free, from the capacity index and each
        host's claims counted by etcd, all at one revision; and the intents cut short. A few
        small reads where `inventory` lists every host record and every claim: at 1,000
        servers x 24 bricks with 10,000 buffers, 0.43 s and 150 ms of the caller's CPU over
        the gateway, most of the cost of a setup (bench/scale.py).

        With `sample(pools, bricks)` (`bricks`: each candidate host's bricks in the pool, from
        the cached capacity index, before any count), only the hosts it returns are counted;
        the others are left in `uncounted`, for `count_rest`. Counting all 1,000 hosts was
        ~1,000 count ranges per setup, most of etcd's cost of one (docs/performance.md)."""
        k = self.keys
        with gc_paused():
            (pools, intents, leases), capacities, alive, revision = self._host_views(
                [
                    range_op(k.pools, prefix_end(k.pools)),
                    range_op(k.intents, prefix_end(k.intents), keys_only=True),
                    range_op(k.intent_leases, prefix_end(k.intent_leases), keys_only=True),
                ]
            )
            views = views_of(capacities, alive)
            hosts = {
                v.name: v.pools[pool]
                for v in views
                if v.alive and not v.drained and v.pools.get(pool, 0) > 0
            }
            pool_infos = parse_pools(_named(pools, k.pools))
            counted = set(sample(pool_infos, hosts)) & hosts.keys() if sample else hosts.keys()
            free = self._count_free(
                pool, [(h, n) for h, n in hosts.items() if h in counted], revision
            )
            live = {Keys.last(kv.key, k.intent_leases) for kv in leases}
            dead = sorted(n for kv in intents if (n := Keys.last(kv.key, k.intents)) not in live)
            self._note_pools(pools)  # create_buffer's work_hosts then reads nothing more
            return PlacementView(
                pool_infos,
                free,
                revision,
                dead,
                tuple((h, n) for h, n in hosts.items() if h not in counted),
            )

    def count_rest(self, pool: str, view: PlacementView) -> PlacementView:
        """`view` with its uncounted hosts counted too, at its revision: every candidate's."""
        with gc_paused():
            free = {**view.free, **self._count_free(pool, list(view.uncounted), view.revision)}
        return view._replace(free=free, uncounted=())

    def _count_free(self, pool: str, hosts: list[tuple[str, int]], revision: int) -> dict[str, int]:
        """Free bricks of `pool` on each of `hosts` (name, bricks in the pool) with one free."""
        k = self.keys
        free = {}
        for start in range(0, len(hosts), _MAX_TXN_OPS):
            chunk = hosts[start : start + _MAX_TXN_OPS]
            counted = self.client.txn(
                [],
                [
                    range_op(
                        k.host_claims(pool, h),
                        prefix_end(k.host_claims(pool, h)),
                        count_only=True,
                        revision=revision,
                    )
                    for h, _ in chunk
                ],
            ).counts
            for (h, bricks), used in zip(chunk, counted, strict=True):
                if bricks > used:
                    free[h] = bricks - used
        return free

    def free_bricks_on(
        self, pool: str, hosts: list[str], revision: int
    ) -> dict[str, list[BrickInfo]]:
        """The free bricks of `pool` on each of `hosts`, as of `revision` (a placement_view's):
        their host records and claims only."""
        k = self.keys
        out = {}
        per_txn = _MAX_TXN_OPS // 2
        for start in range(0, len(hosts), per_txn):
            chunk = hosts[start : start + per_txn]
            ops = []
            for h in chunk:
                ops += [
                    range_op(k.host(h), revision=revision),
                    range_op(
                        k.host_claims(pool, h),
                        prefix_end(k.host_claims(pool, h)),
                        keys_only=True,
                        revision=revision,
                    ),
                ]
            r = self.client.txn([], ops)
            for i, h in enumerate(chunk):
                records, claims = r.ranges[2 * i], r.ranges[2 * i + 1]
                taken = {k.parse_claim(kv.key)[2] for kv in claims}
                bricks = (
                    next(iter(parse_hosts(_named(records, k.hosts))), {}).get("bricks", ())
                    if records
                    else ()
                )
                out[h] = [
                    BrickInfo.from_json(h, b)
                    for b in bricks
                    if b["pool"] == pool and b["name"] not in taken
                ]
        return out

    def host_summary_inventory(self, host: str, pools: list[str]) -> Inventory:
        """`summary_inventory` narrowed to one host, in one read: the pools, the host's
        capacity index and alive key, and its claims counted in each of `pools` (the pools it
        has bricks in). `summarize` of it gives that host's share of each pool, so summing the
        hosts gives the pool's summary; dacd's metrics export it, a read that costs the same
        on a site of 10 hosts as on one of 1,000."""
        k = self.keys
        pools = sorted(set(pools))  # a host's bricks are in a few pools: far below _MAX_TXN_OPS
        r = self.client.txn(
            [],
            [
                range_op(k.pools, prefix_end(k.pools)),
                range_op(k.capacity(host)),
                range_op(k.alive_key(host), keys_only=True),
            ]
            + [
                range_op(
                    k.host_claims(p, host), prefix_end(k.host_claims(p, host)), count_only=True
                )
                for p in pools
            ],
        )
        pool_recs, capacity, alive = r.ranges[:3]
        counts = ClaimCounts()
        for pool, n in zip(pools, r.counts[3:], strict=True):
            counts.per_pool[pool] = counts.per_host[(pool, host)] = n
        views = views_of(_named(capacity, k.capacities), {host} if alive else set())
        return Inventory.of_counts(
            parse_pools(_named(pool_recs, k.pools)), views, counts, r.revision
        )


def _fingerprint(kvs: list[KV]) -> list[list[str | int]]:
    return [[kv.key, kv.create_revision, kv.mod_revision] for kv in kvs]
