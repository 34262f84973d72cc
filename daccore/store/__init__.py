"""dac's state in etcd: records in, records out. The only module that reads or writes keys.

Writers are unique per key (see `daccore.records.keys`); every read-modify-write compares the key's
mod_revision, and the allocation of a buffer is one transaction that creates the buffer and all
of its claim keys, or changes nothing.

Every write of a spec also puts, in the same transaction, `work/<host>/<name>` for each host
that acts on the buffer (`Store.work_hosts`), and its delete drops them: a dacd watches its
own `work/<host>/` instead of every spec (at 1,000 servers the `buffers/` watch sent each
change to every dacd: docs/performance.md).
"""

from __future__ import annotations

import json
import threading
import time
from collections import namedtuple
from typing import TYPE_CHECKING

from daccore.errors import (
    AdminError,
    BadRecord,
    Conflict,
    DacError,
    Fenced,
    InternalError,
    NotFound,
    Superseded,
    UserError,
)
from daccore.etcd.client import EtcdClient
from daccore.etcd.types import (
    KV,
    Compare,
    Op,
    absent,
    delete_op,
    key_bytes,
    mod_is,
    put_op,
    range_op,
)
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

if TYPE_CHECKING:
    from typing import Callable, Iterable, Iterator, TypeVar

    from pydantic import BaseModel

    from daccore.etcd.stream import LeaseKeeper, Watch
    from daccore.records.models import Buffer, Host, Owed, Pool, Status
    from daccore.rules.inventory import PoolInfo
    from daccore.settings.config import EtcdSettings

    R = TypeVar("R", bound=BaseModel)

__all__ = ["Store", "Versioned", "Change", "PlacementView", "AllocationConflict"]


def _m():
    """The record models, imported on first use: pydantic costs ~150 ms to import, and the
    Slurm hooks that run inside slurmctld read what they need without it (`*_json` methods)."""
    from daccore.records import models

    return models


#: etcd refuses transactions of more than --max-txn-ops operations (default 128) on either
#: side (compares, success ops, failure ops).
_MAX_TXN_OPS = 100
#: The most claim keys (bricks, plus a Lustre MGS slot) a buffer may have to be claimed in one
#: transaction, with its spec and intent compares; a bigger one is claimed in chunks of as many
#: under an intent (`Store.create_buffer`, docs/architecture.md).
CLAIMS_PER_TXN = _MAX_TXN_OPS - 4
#: Seconds an allocating call's intent lives without a refresh: a call that dies mid-way
#: leaves its intent to be rolled back by the next allocation (or dacd start) after this.
INTENT_TTL = 10
#: seconds an owner's lock outlives a call that died holding it (Store.owner_lock): longer
#: than a persistent buffer's allocation takes
OWNER_LOCK_TTL = 60


class _GuardFailed(Exception):
    def __init__(self, compares: list[Compare]):
        self.compares = compares


class AllocationConflict(Conflict):
    """Another buffer claimed one of the chosen bricks first: re-read and place again."""


#: What placement reads first: pools, free bricks per host of one pool, at one revision, and
#: the buffers whose chunked allocation was cut short. `uncounted`: the candidate hosts left
#: out of a sampled count, with their bricks in the pool (`Store.count_rest`).
PlacementView = namedtuple(
    "PlacementView", "pools free revision dead_intents uncounted", defaults=((),)
)
#: A record with the mod_revision to compare against when writing it back.
#: `create_revision` tells one incarnation of a key from another of the same name
Versioned = namedtuple("Versioned", "record mod_revision create_revision", defaults=(0,))
#: One event of a watch: `record` is None when the key was deleted.
Change = namedtuple("Change", "name record revision bad", defaults=(False,))


class Store:
    """Typed access to dac's keys. Constructing one does no I/O."""

    def __init__(self, client: EtcdClient, prefix: str = "/dac/v1/"):
        self.client = client
        self.keys = Keys(prefix)
        self._views: dict | None = None  # _host_views' cache
        #: host -> (its alive key, the revision of its last bind): keep_alive fences this
        #: store's writes of that host's statuses, and its reaps, on the dacd's lease (dacd);
        #: empty for every other caller
        self._fences: dict[str, tuple[str, int]] = {}
        #: pool -> whether its backend runs each step once, on the primary, for all hosts:
        #: read from the pool records once (dac writes a pool record once and never changes
        #: it: ensure_pool refuses a different definition)
        self._once: dict[str, bool] = {}

    @classmethod
    def from_settings(
        cls, etcd: EtcdSettings, transport: str | None = None, role: str = "admin"
    ) -> Store:
        """`transport` overrides the configured one; `role` is the etcd identity to act as:
        dacd (storage servers), slurm (the Slurm hooks), admin (root on admin hosts)."""
        client = EtcdClient(
            etcd.urls,
            cacert=etcd.cacert,
            cert=etcd.cert,
            key=etcd.key,
            timeout=etcd.timeout,
            transport=transport or etcd.transport,
            credential=_credential(etcd.credentials_dir, role, cache=False),
        )
        return cls(client, etcd.prefix)

    @classmethod
    def from_dict(
        cls,
        etcd: dict,
        transport: str | None = None,
        max_timeout: float | None = None,
        role: str = "slurm",
    ) -> Store:
        """From `config_cache.load_settings()["etcd"]`, for the hooks inside slurmctld: one
        process per call, so the role's token is cached on disk (daccore.etcd.auth)."""
        timeout = etcd["timeout"] if max_timeout is None else min(etcd["timeout"], max_timeout)
        client = EtcdClient(
            etcd["urls"],
            cacert=etcd.get("cacert"),
            cert=etcd.get("cert"),
            key=etcd.get("key"),
            timeout=timeout,
            transport=transport or etcd["transport"],
            credential=_credential(etcd["credentials_dir"], role, cache=True),
        )
        return cls(client, etcd["prefix"])

    # -- pools ---------------------------------------------------------------------------------

    def ensure_pool(self, pool: Pool) -> Pool:
        """Create the pool record if missing; refuse a different definition of an existing one."""
        key = self.keys.pool(pool.name)
        r = self.client.txn([absent(key)], [put_op(key, _dump(pool))], [range_op(key)])
        if r.succeeded:
            return pool
        existing = _load(_m().Pool, r.ranges[0][0])
        if existing != pool:
            raise AdminError(
                f"pool '{pool.name}' is registered as {existing.model_dump(mode='json')} but this "
                f"config says {pool.model_dump(mode='json')}: make every dacd's config agree, or "
                f"delete the pool once no buffer uses it"
            )
        return existing

    def pools(self) -> dict[str, Pool]:
        """The registered pools; a record that is no Pool is left out, as in the pools summary
        (`inventory.parse_pools`): one bad record must not stop every job's setup."""
        kvs, _ = self.client.range(self.keys.pools, prefix_end(self.keys.pools))
        out = {}
        for kv in kvs:
            try:
                pool = _load(_m().Pool, kv)
            except BadRecord:
                continue
            out[pool.name] = pool
        return out

    # -- hosts and liveness --------------------------------------------------------------------

    def register_host(self, host: Host) -> Host:
        """Write the host's record, keeping the drained flag an admin may have set.

        A brick that a buffer holds may neither leave the host nor move to another pool: its
        claim key names its pool, so a move would let a second buffer claim it. The write
        compares every such claim key absent, and refuses with the buffer's name otherwise.
        """
        k = self.keys

        def change(old: Host | None) -> Host:
            return host.model_copy(update={"drained": old.drained}) if old else host

        def still_free(old: Host | None) -> list[Compare]:
            now = {b.name: b.pool for b in host.bricks}
            return [
                absent(k.claim(b.pool, host.name, b.name))
                for b in (old.bricks if old else ())
                if now.get(b.name) != b.pool
            ]

        try:
            return self._update(_m().Host, k.host(host.name), change, self._capacity_op, still_free)
        except _GuardFailed as e:
            held = {
                kv.key: _load(_m().BrickClaim, kv).buffer
                for c in e.compares
                if (kv := self.client.get(c.key))
            }
            if not held:
                raise Conflict(f"host '{host.name}' kept changing while registering") from None
            key, buffer = sorted(held.items())[0]
            pool, _, brick = k.parse_claim(key)
            raise AdminError(
                f"host '{host.name}': brick '{brick}' is held by buffer "
                f"'{buffer}' in pool '{pool}'; it cannot leave that pool until "
                "the buffer is torn down"
            ) from None

    def set_drained(self, name: str, drained: bool) -> Host:
        def change(old: Host | None) -> Host:
            if old is None:
                raise NotFound(f"unknown host '{name}'")
            return old.model_copy(update={"drained": drained})

        return self._update(_m().Host, self.keys.host(name), change, self._capacity_op)

    def _capacity_op(self, host: Host) -> Op:
        """The host's capacity index, written in the same txn as its record, never apart."""
        return put_op(self.keys.capacity(host.name), _dump(_m().HostCapacity.of(host)))

    def hosts(self) -> dict[str, Host]:
        return {h.name: h for h in self._list(_m().Host, self.keys.hosts)}

    def keep_alive(
        self, host: str, ttl: int, on_bound: Callable[[], None] | None = None
    ) -> LeaseKeeper:
        """Start keeping `alive/<host>` on a lease; returns once the key exists. From then on
        this store's status writes and reaps are fenced on that key: each compares it unchanged
        since its last bind, so once the lease lapses (the key goes with it) they raise Fenced
        until a new lease is bound; `on_bound` is called after each new binding but the first
        (the caller lists its buffers again)."""
        from daccore.etcd.stream import LeaseKeeper

        key = self.keys.alive_key(host)

        def bind(lease: int) -> None:
            first = host not in self._fences
            self._fences[host] = (key, self.client.put(key, "", lease))
            if on_bound is not None and not first:
                on_bound()

        return LeaseKeeper(self.client, ttl, bind, name=f"lease-{host}").start()

    def _fenced_txn(self, hosts: list[str], compare: list[Compare], ops: list[Op]) -> bool:
        """`ops` if `compare` holds; Fenced when one of `hosts` is kept alive by this store and
        its lease lapsed since (its alive key is gone, or bound anew by someone else)."""
        fences = [(h, *self._fences[h]) for h in hosts if h in self._fences]
        if not fences and not compare:
            self.client.txn([], ops)
            return True
        r = self.client.txn(
            [mod_is(key, rev) for _, key, rev in fences] + compare,
            ops,
            [range_op(key) for _, key, _ in fences],
        )
        if r.succeeded:
            return True
        for (host, _, rev), kvs in zip(fences, r.ranges, strict=False):
            if not kvs or kvs[0].mod_revision != rev:
                raise Fenced(host)
        return False

    def lease_ages(self) -> dict[str, float]:
        """Live host -> seconds since its dacd last renewed its lease (granted TTL minus what
        is left): near 0 for a healthy dacd, growing toward the TTL for a stuck one."""
        kvs, _ = self.client.range(self.keys.alive, prefix_end(self.keys.alive))
        ages = {}
        for kv in kvs:
            left, granted = self.client.lease_time_to_live(kv.lease)
            if left >= 0:
                ages[Keys.last(kv.key, self.keys.alive)] = float(granted - left)
        return ages

    def alive_among(self, hosts: list[str]) -> set[str]:
        """Those of `hosts` that are alive: a key each for a few, the whole listing for many
        (a waiting Slurm call asks this of its buffer's hosts at every look)."""
        if len(hosts) > 50:
            return self.alive() & set(hosts)
        k = self.keys
        r = self.client.txn([], [range_op(k.alive_key(h), keys_only=True) for h in hosts])
        return {h for h, kvs in zip(hosts, r.ranges, strict=True) if kvs}

    def alive(self) -> set[str]:
        kvs, _ = self.client.range(self.keys.alive, prefix_end(self.keys.alive), keys_only=True)
        return {Keys.last(kv.key, self.keys.alive) for kv in kvs}

    # -- inventory -----------------------------------------------------------------------------

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
            owner = (lambda kv: _claimant(kv) or "?") if claim_owners else (lambda kv: "")
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

    def _host_views(self, extra: list[Op]) -> tuple[list, list[bytes], set[str], int]:
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

    def _views_cache(self) -> dict | None:
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

    def _save_views(self, doc: dict) -> None:
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
                    BrickInfo(
                        h,
                        b["name"],
                        b.get("device", ""),
                        b["capacity"],
                        b["pool"],
                        b.get("socket", 0),
                        b.get("pcie_switch", "0"),
                    )
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

    def host_claims(
        self, host: str, pools: list[str]
    ) -> tuple[dict[str, tuple[str, str | None] | None], int]:
        """The claims on `host`'s bricks in `pools` (claim key -> (buffer, its primary host
        or None when the claim does not say), or None for a record that is no claim), and the
        revision of the read (to watch from): which buffers the host's dacd works on."""
        k = self.keys
        prefixes = [k.host_claims(p, host) for p in sorted(set(pools))]
        r = self.client.txn([], [range_op(p, prefix_end(p)) for p in prefixes])
        return {kv.key: _claim_of(kv) for kvs in r.ranges for kv in kvs}, r.revision

    def watch_host_claims(
        self, host: str, pool: str, start_revision: int = 0
    ) -> tuple[Watch, Iterator[Change]]:
        """Every claim made or released on `host`'s bricks in `pool`: `name` is the claim
        key, `record` (buffer, primary host) as host_claims has it, None when released or
        when what was put is no claim (`bad` then)."""
        prefix = self.keys.host_claims(pool, host)
        w = self.client.watch(prefix, prefix_end(prefix), start_revision)

        def changes() -> Iterator[Change]:
            for ev in w:
                claim = _claim_of(ev.kv) if ev.type == "put" else None
                yield Change(
                    ev.kv.key, claim, ev.kv.mod_revision, ev.type == "put" and claim is None
                )

        return w, changes()

    def claims(self) -> dict[tuple[str, str], str]:
        """Every claim: (host, brick) -> buffer name."""
        kvs, _ = self.client.range(self.keys.claims, prefix_end(self.keys.claims))
        return {self.keys.parse_claim(kv.key)[1:]: _load(_m().BrickClaim, kv).buffer for kv in kvs}

    # -- work keys -----------------------------------------------------------------------------

    def work_hosts(self, pool: str, primary: str, hosts: Iterable[str]) -> list[str]:
        """The hosts whose dacd acts on a buffer of `pool`, and so get its work keys: the
        primary alone where the pool's backend runs each step once for all hosts (lustre,
        daos), else every host of the buffer. A pool without a record gets every host: a
        wake-up too many costs a dacd nothing, one too few leaves a buffer unseen."""
        if pool not in self._once:
            kvs, _ = self.client.range(self.keys.pools, prefix_end(self.keys.pools))
            self._note_pools(kvs)
        return [primary] if self._once.get(pool) else sorted(set(hosts))

    def _note_pools(self, kvs: list[KV]) -> None:
        from daccore.backends import runs_once_for_all_hosts

        for kv in kvs:
            doc = _doc(kv.value)
            if doc is None:
                continue  # not a pool record: its buffers wake every host
            backend = doc.get("backend", "local")
            if isinstance(backend, str):
                self._once[Keys.last(kv.key, self.keys.pools)] = runs_once_for_all_hosts(backend)

    def wake(self, host: str, name: str) -> None:
        """Put `host`'s work key of buffer `name`, so its dacd looks at the buffer again: a
        host that deleted its part last wakes the primary, whose reap it waits for (a status
        write wakes no one). A key left after the reap is a stray, dropped at dacd's resync."""
        self.client.put(self.keys.work(host, name), "wake")

    def _work_puts(self, name: str, generation: int, hosts: list[str]) -> list[Op]:
        """The puts of a spec's work keys; the value is the spec's generation, for whoever
        reads the keys by hand: what wakes a dacd is the put itself."""
        return [put_op(self.keys.work(h, name), str(generation)) for h in hosts]

    def _wake_rest(self, name: str, revision: int, ops: list[Op]) -> None:
        """The work keys that did not fit in the spec's own transaction, right after it,
        each chunk while the spec is still the one written at `revision`: a newer write puts
        every work key itself, and a buffer deleted meanwhile must not get keys again."""
        key = self.keys.buffer(name)
        for start in range(0, len(ops), _MAX_TXN_OPS):
            if not self.client.txn(
                [mod_is(key, revision)], ops[start : start + _MAX_TXN_OPS]
            ).succeeded:
                return

    def watch_host_work(self, host: str, start_revision: int = 0) -> tuple[Watch, Iterator[Change]]:
        """The buffers `host`'s dacd must look at again: `name` the buffer, `record` the
        key's value (None when it was deleted). Names only: dacd reads and checks the spec."""
        prefix = self.keys.host_work(host)
        w = self.client.watch(prefix, prefix_end(prefix), start_revision)
        return w, (
            Change(
                Keys.last(ev.kv.key, prefix),
                ev.kv.value if ev.type == "put" else None,
                ev.kv.mod_revision,
            )
            for ev in w
        )

    def drop_stray_work(self, host: str, pools: list[str]) -> list[str]:
        """Delete `host`'s work keys that name a buffer holding none of its bricks in `pools`
        (its claims read in the same transaction): written by hand, or by a writer that got
        the acting hosts wrong (a key whose buffer's claims are being released goes too: the
        spec's delete would drop it). Each goes only if unchanged since read, so a buffer
        created anew under the name keeps its key. Returns their buffers."""
        k = self.keys
        mine = k.host_work(host)
        r = self.client.txn(
            [],
            [range_op(mine, prefix_end(mine), keys_only=True)]
            + [
                range_op(k.host_claims(p, host), prefix_end(k.host_claims(p, host)))
                for p in sorted(set(pools))
            ],
        )
        held = {c[0] for kvs in r.ranges[1:] for kv in kvs if (c := _claim_of(kv)) is not None}
        gone = []
        for kv in r.ranges[0]:
            name = Keys.last(kv.key, mine)
            if (
                name not in held
                and self.client.txn(
                    [mod_is(kv.key, kv.mod_revision)], [delete_op(kv.key)]
                ).succeeded
            ):
                gone.append(name)
        return gone

    def spec_revisions(self, names: list[str]) -> dict[str, int]:
        """Buffer name -> its spec's mod_revision, for those of `names` that exist: keys only,
        as many to a transaction as etcd allows (dacd's periodic resync)."""
        out = {}
        for start in range(0, len(names), _MAX_TXN_OPS):
            chunk = names[start : start + _MAX_TXN_OPS]
            r = self.client.txn([], [range_op(self.keys.buffer(n), keys_only=True) for n in chunk])
            out.update(
                {n: kvs[0].mod_revision for n, kvs in zip(chunk, r.ranges, strict=True) if kvs}
            )
        return out

    # -- buffers -------------------------------------------------------------------------------

    def create_buffer(self, buffer: Buffer) -> int:
        """Claim every brick of the allocation and create the buffer, all or nothing.

        Raises UserError when the buffer exists, AllocationConflict when a brick was claimed
        meanwhile. Returns the buffer's mod_revision.

        Up to CLAIMS_PER_TXN claim keys, one transaction does it all. A bigger buffer (etcd
        refuses more than --max-txn-ops, default 128, operations on either side of one) is
        claimed in chunks under an intent: its spec at `intents/<name>` and a key bound to this
        call's lease; each chunk, and the commit that turns the intent into the spec, compares
        that lease key's create_revision, so once the lease is gone the call can neither claim
        nor commit, and whoever finds the intent without its lease key rolls it back
        (`recover_intents`). No brick is ever claimed twice: a claim key is still created only
        where absent.
        """
        k = self.keys
        name = buffer.name
        claim_keys = self._claim_keys(
            buffer.request.pool, buffer.allocation.bricks, buffer.allocation.mgs_host
        )
        claim = _dump(_m().BrickClaim(buffer=name, primary=buffer.allocation.primary_host))
        spec = _dump(buffer)
        work = self._work_puts(
            name,
            buffer.generation,
            self.work_hosts(
                buffer.request.pool, buffer.allocation.primary_host, buffer.allocation.hosts
            ),
        )
        if len(claim_keys) > CLAIMS_PER_TXN:
            return self._create_in_chunks(name, spec, claim, claim_keys, work)
        # the work keys that do not fit (a local buffer over ~50 hosts) right after: each of
        # those hosts holds a claim made in this transaction, whose event wakes its dacd too
        room = _MAX_TXN_OPS - 1 - len(claim_keys)
        r = self.client.txn(
            [absent(k.buffer(name)), absent(k.intent(name))] + [absent(c) for c in claim_keys],
            [put_op(k.buffer(name), spec)] + [put_op(c, claim) for c in claim_keys] + work[:room],
            [range_op(k.buffer(name), keys_only=True)],
        )
        if r.succeeded:
            self._wake_rest(name, r.revision, work[room:])
            return r.revision
        if r.ranges[0]:
            raise UserError(f"buffer '{name}' already exists")
        raise AllocationConflict(
            f"buffer '{name}': a chosen brick was claimed by another buffer"
            " (or another call is allocating it)"
        )

    def _claim_keys(self, pool: str, bricks, mgs_host: str | None) -> list[str]:
        """The claim keys of an allocation: one per brick, and a per-buffer Lustre MGS's slot
        on its host."""
        k = self.keys
        keys = [k.claim(pool, b.host, b.brick) for b in bricks]
        if len(set(keys)) != len(keys):
            raise InternalError("an allocation lists a brick twice")
        return keys + ([k.mgs(mgs_host)] if mgs_host else [])

    def _create_in_chunks(
        self, name: str, spec: str, claim: str, claim_keys: list[str], work: list[Op]
    ) -> int:
        k = self.keys
        intent, lease_key = k.intent(name), k.intent_lease(name)
        lease = self.client.lease_grant(INTENT_TTL)
        refreshed = time.monotonic()
        try:
            r = self.client.txn(
                [absent(k.buffer(name)), absent(intent), absent(lease_key)],
                [put_op(intent, spec), put_op(lease_key, "", lease)],
                [range_op(k.buffer(name), keys_only=True)],
            )
            if not r.succeeded:
                if r.ranges[0]:
                    raise UserError(f"buffer '{name}' already exists")
                raise AllocationConflict(f"buffer '{name}' is being allocated by another call")
            alive = Compare(lease_key, "CREATE", r.revision)  # this call's intent, no other
            try:
                for start in range(0, len(claim_keys), CLAIMS_PER_TXN):
                    if time.monotonic() - refreshed > INTENT_TTL / 3:
                        if self.client.lease_keepalive(lease) == 0:
                            raise AllocationConflict(
                                f"buffer '{name}': the allocation took "
                                f"longer than {INTENT_TTL}s; starting over"
                            )
                        refreshed = time.monotonic()
                    self._claim_chunk(
                        name, alive, claim, claim_keys[start : start + CLAIMS_PER_TXN]
                    )
                # the spec and its work keys in one transaction; beyond it (a local buffer
                # over ~100 hosts) the rest right after: those hosts' claims came before the
                # spec, so a call that dies in between leaves them to dacd's resync
                room = _MAX_TXN_OPS - 3
                r = self.client.txn(
                    [alive, absent(k.buffer(name))],
                    [put_op(k.buffer(name), spec), delete_op(intent), delete_op(lease_key)]
                    + work[:room],
                )
                if not r.succeeded:
                    raise AllocationConflict(
                        f"buffer '{name}': its intent was rolled back "
                        "before it committed; starting over"
                    )
                self._wake_rest(name, r.revision, work[room:])
                return r.revision
            except BaseException:
                try:  # our own claims, then the intent, while it is still ours
                    self._release(name, claim_keys, alive)
                    self.client.txn([alive], [delete_op(intent), delete_op(lease_key)])
                except DacError:
                    pass  # the lease is gone, or etcd is: recover_intents finishes it
                raise
        finally:
            self.client.lease_revoke(lease)  # gone already if it committed or rolled back

    def _claim_chunk(self, name: str, alive: Compare, claim: str, keys: list[str]) -> None:
        """Create `keys` as `name`'s claims while its intent is alive; AllocationConflict if
        one is held by another buffer or the intent is gone."""
        todo = keys
        for _ in range(3):
            r = self.client.txn(
                [alive] + [absent(c) for c in todo],
                [put_op(c, claim) for c in todo],
                [range_op(alive.key, keys_only=True)] + [range_op(c) for c in todo],
            )
            if r.succeeded:
                return
            found = r.ranges[0]
            if not found or found[0].create_revision != alive.revision:
                raise AllocationConflict(
                    f"buffer '{name}': its intent was rolled back before "
                    "it committed; starting over"
                )
            held = {kvs[0].key: _claimant(kvs[0]) for kvs in r.ranges[1:] if kvs}
            if any(b != name for b in held.values()):
                raise AllocationConflict(
                    f"buffer '{name}': a chosen brick was claimed by another buffer"
                )
            # claims of ours already: a retried transaction whose first reply was lost
            # (nothing else writes this name's claims while its intent lives)
            todo = [c for c in todo if c not in held]
            if not todo:
                return
        raise AllocationConflict(f"buffer '{name}': claims kept changing")

    def _release(self, name: str, claim_keys: list[str], *guards: Compare) -> None:
        """Delete those of `claim_keys` that `name` holds, in chunks, each key compared at the
        revision it was read (a key freed and claimed again by another buffer meanwhile is
        left alone). `guards`: more compares every deleting transaction makes; Conflict when
        one of them fails."""
        for start in range(0, len(claim_keys), CLAIMS_PER_TXN):
            chunk = claim_keys[start : start + CLAIMS_PER_TXN]
            for _ in range(20):
                r = self.client.txn([], [range_op(c) for c in chunk])
                mine = [kvs[0] for kvs in r.ranges if kvs and _claimant(kvs[0]) == name]
                if not mine:
                    break
                d = self.client.txn(
                    list(guards) + [mod_is(kv.key, kv.mod_revision) for kv in mine],
                    [delete_op(kv.key) for kv in mine],
                    [range_op(g.key, keys_only=True) for g in guards],
                )
                if d.succeeded:
                    break
                for g, kvs in zip(guards, d.ranges, strict=True):
                    kv = kvs[0] if kvs else None
                    now = (
                        (kv.create_revision if g.target == "CREATE" else kv.mod_revision)
                        if kv
                        else 0
                    )
                    if now != g.revision:
                        raise Conflict(f"{g.key} changed while releasing '{name}''s claims")
            else:
                raise Conflict(f"claims of '{name}' kept changing while releasing them")

    def recover_intents(
        self, names: list[str] | None = None, unreadable: list[str] | None = None
    ) -> list[str]:
        """Roll back every intent whose call is gone (its lease key expired): release the
        claims it made, then drop it. `names`: those found dead already (Inventory's
        `dead_intents`). Safe to run anywhere, any number of times at once; returns the
        buffers rolled back. An intent that is no spec dac wrote names no claim to release:
        it is left for an admin, its key added to `unreadable`."""
        k = self.keys
        if names is None:
            r = self.client.txn(
                [],
                [
                    range_op(k.intents, prefix_end(k.intents), keys_only=True),
                    range_op(k.intent_leases, prefix_end(k.intent_leases), keys_only=True),
                ],
            )
            live = {Keys.last(kv.key, k.intent_leases) for kv in r.ranges[1]}
            names = [n for kv in r.ranges[0] if (n := Keys.last(kv.key, k.intents)) not in live]
        done = []
        for name in names:
            kv = self.client.get(k.intent(name))
            if kv is None or self.client.get(k.intent_lease(name)) is not None:
                continue  # rolled back or committed by someone else, or alive after all
            try:
                doc = _doc(kv.value)
                alloc = doc["allocation"]  # type: ignore[index]
                keys = self._claim_keys(
                    doc["request"]["pool"],  # type: ignore[index]
                    [_Ref(b["host"], b["brick"]) for b in alloc["bricks"]],
                    alloc.get("mgs_host"),
                )
            except (TypeError, KeyError, AttributeError):  # None, or not a spec's fields
                if unreadable is not None:
                    unreadable.append(kv.key)
                continue
            # The lease key is absent: the call that wrote the intent can claim no more, and
            # no other call can start one for this name while the intent exists. Every delete
            # compares the intent unchanged: once another recoverer has dropped it, a new
            # allocation of the same name may hold claims of that name.
            try:
                self._release(name, keys, mod_is(kv.key, kv.mod_revision))
            except Conflict:
                continue
            self.client.txn(
                [mod_is(kv.key, kv.mod_revision), absent(k.intent_lease(name))], [delete_op(kv.key)]
            )
            done.append(name)
        return done

    def mgs_hosts(self) -> set[str]:
        """Hosts whose one Lustre MGS slot a buffer holds."""
        kvs, _ = self.client.range(
            self.keys.mgs_slots, prefix_end(self.keys.mgs_slots), keys_only=True
        )
        return {Keys.last(kv.key, self.keys.mgs_slots) for kv in kvs}

    def buffer(self, name: str) -> Versioned | None:
        kv = self.client.get(self.keys.buffer(name))
        return (
            Versioned(_load(_m().Buffer, kv), kv.mod_revision, kv.create_revision) if kv else None
        )

    def buffer_text(self, name: str) -> Versioned | None:
        """The spec as etcd holds it, unparsed, with its key: for dacd, which checks every
        record itself (daccore.rules.trust) so that a bad one is skipped, not raised."""
        key = self.keys.buffer(name)
        kv = self.client.get(key)
        return Versioned((key, kv.value), kv.mod_revision, kv.create_revision) if kv else None

    def owner_lock(self, uid: int, timeout: float = 120.0):
        """A context that holds `owner-locks/<uid>` for one call at a time: the key is created
        only if absent, bound to a lease of OWNER_LOCK_TTL seconds (a call that dies frees it
        then), and revoked on exit. Waits up to `timeout` for another holder."""
        import contextlib
        import random

        @contextlib.contextmanager
        def held():
            key = self.keys.owner_lock(uid)
            lease = self.client.lease_grant(OWNER_LOCK_TTL)
            try:
                deadline = time.monotonic() + timeout
                while not self.client.txn([absent(key)], [put_op(key, "", lease)]).succeeded:
                    if time.monotonic() > deadline:
                        raise Conflict(
                            f"persistent buffers of uid {uid} are being made by "
                            f"another call for over {timeout:.0f}s: try again"
                        )
                    time.sleep(random.uniform(0.01, 0.05))
                yield
            finally:
                try:
                    self.client.lease_revoke(lease)  # the key goes with it
                except DacError:
                    pass  # etcd unreachable: the lease runs out

        return held()

    def persistent_usage(self, uid: int | None = None, gid: int | None = None) -> dict:
        """{pool: [buffers, bytes]} of the persistent buffers owned by `uid` (or of group
        `gid`), from the specs as JSON."""
        usage: dict[str, list[int]] = {}
        for doc in self.buffer_docs().values():
            if (
                not doc.get("persistent")
                or (uid is not None and doc.get("owner_uid") != uid)
                or (gid is not None and doc.get("owner_gid") != gid)
            ):
                continue
            try:
                pool = doc["request"]["pool"]
                size = sum(b["capacity"] for b in doc["allocation"]["bricks"])
            except (KeyError, TypeError):
                continue
            u = usage.setdefault(pool, [0, 0])
            u[0], u[1] = u[0] + 1, u[1] + size
        return usage

    def buffer_owners(self) -> dict[str, int]:
        """Buffer name -> owner uid, read without validating every spec (job_process)."""
        return {
            name: doc["owner_uid"]
            for name, doc in self.buffer_docs().items()
            if isinstance(doc.get("owner_uid"), int)
        }

    def buffer_names(self) -> tuple[list[str], int]:
        """Every buffer's name, and the revision of the read (to watch from)."""
        kvs, revision = self.client.range(
            self.keys.buffers, prefix_end(self.keys.buffers), keys_only=True
        )
        return [Keys.last(kv.key, self.keys.buffers) for kv in kvs], revision

    # The Slurm functions read and change specs as plain JSON, unvalidated: importing pydantic
    # would cost each call 0.2 s (docs/performance.md). Specs are written whole by validated
    # code; what those functions change (desired state, attachments, generation) they take
    # from validated input, as a pydantic model_copy would, which does not validate either.

    def buffer_json(self, name: str) -> dict | None:
        current = self.buffer_doc(name)
        return current.record if current else None

    def buffer_doc(self, name: str) -> Versioned | None:
        """The spec as JSON with its revision, for a compare-and-swap."""
        kv = self.client.get(self.keys.buffer(name))
        return Versioned(json.loads(kv.value), kv.mod_revision, kv.create_revision) if kv else None

    def buffer_docs(self) -> dict[str, dict]:
        """Every spec that is a JSON object: one that is not is no buffer any Slurm call can
        act on, and must not stop the calls for the others (dacd logs it, docs/security.md)."""
        kvs, _ = self.client.range(self.keys.buffers, prefix_end(self.keys.buffers))
        docs = {}
        for kv in kvs:
            doc = _doc(kv.value)
            if doc is not None:
                docs[Keys.last(kv.key, self.keys.buffers)] = doc
        return docs

    def buffers(self) -> dict[str, Buffer]:
        return {b.name: b for b in self._list(_m().Buffer, self.keys.buffers)}

    def update_buffer(self, buffer: Buffer, mod_revision: int) -> int:
        """Compare-and-swap the spec; Conflict when someone changed it since `mod_revision`."""
        return self.update_buffer_doc(buffer.model_dump(mode="json"), mod_revision)

    def update_buffer_doc(self, doc: dict, mod_revision: int) -> int:
        """update_buffer of a spec in JSON; its work keys are put in the same transaction
        (those beyond one transaction's worth right after: `_wake_rest`)."""
        key = self.keys.buffer(doc["name"])
        alloc = doc["allocation"]
        work = self._work_puts(
            doc["name"],
            doc["generation"],
            self.work_hosts(
                doc["request"]["pool"], alloc["primary_host"], (b["host"] for b in alloc["bricks"])
            ),
        )
        room = _MAX_TXN_OPS - 1
        r = self.client.txn(
            [mod_is(key, mod_revision)],
            [put_op(key, json.dumps(doc, separators=(",", ":")))] + work[:room],
        )
        if not r.succeeded:
            raise Conflict(f"buffer '{doc['name']}' changed since revision {mod_revision}")
        self._wake_rest(doc["name"], r.revision, work[room:])
        return r.revision

    def delete_buffer(self, name: str, mod_revision: int) -> None:
        """Release the buffer's claims and drop its spec and statuses: one transaction when
        its claims fit in one (CLAIMS_PER_TXN); else the claims first, in chunks, each
        comparing the spec unchanged, then the spec and statuses. A call cut short leaves the
        spec, so the next pass (dacd's reap, or forget) finishes it; a brick freed meanwhile
        may be claimed again at once, which is safe since every host has deleted the
        buffer by then."""
        current = self.buffer(name)
        if current is None:
            return
        buf: Buffer = current.record
        k = self.keys
        keys = self._claim_keys(buf.request.pool, buf.allocation.bricks, buf.allocation.mgs_host)
        work = [
            delete_op(k.work(h, name))
            for h in self.work_hosts(
                buf.request.pool, buf.allocation.primary_host, buf.allocation.hosts
            )
        ]
        spec = mod_is(k.buffer(name), mod_revision)
        changed = f"buffer '{name}' changed since revision {mod_revision}"
        fence = [buf.allocation.primary_host]
        if len(keys) > CLAIMS_PER_TXN or len(keys) + 2 + len(work) > _MAX_TXN_OPS:
            if current.mod_revision != mod_revision:
                raise Conflict(changed)
            self._release(name, keys, spec)
            keys = []
        # Work keys beyond one transaction (a local buffer over ~100 hosts) go before the
        # spec, each chunk comparing it unchanged: a pass cut short leaves the spec, and the
        # next pass finishes; a work key never outlives its spec.
        room = _MAX_TXN_OPS - 2 - len(keys)
        for start in range(room, len(work), _MAX_TXN_OPS):
            if not self._fenced_txn(fence, [spec], work[start : start + _MAX_TXN_OPS]):
                raise Conflict(changed)
        if not self._fenced_txn(
            fence,
            [spec],
            [delete_op(c) for c in keys]
            + work[:room]
            + [
                delete_op(k.buffer_statuses(name), prefix_end(k.buffer_statuses(name))),
                delete_op(k.buffer(name)),
            ],
        ):
            raise Conflict(changed)

    # -- status --------------------------------------------------------------------------------

    def put_status(self, status: Status, incarnation: int = 0) -> None:
        """Single writer per key (the host's own dacd), so no compare but the fence's and,
        with `incarnation` (the spec's create_revision when the writer read it), the spec's:
        Superseded when that buffer was deleted or created anew since. Without it, the last
        write of a step for a buffer Slurm tore down and set up again (same name) could land
        in the new buffer's statuses and count for it."""
        self.put_statuses([status], incarnation)

    def put_statuses(self, statuses: list[Status], incarnation: int = 0) -> None:
        """Several hosts' statuses of one buffer (a lustre or daos buffer's primary writes
        every host's): as few transactions as etcd allows, not one request per host."""
        (name,) = {s.buffer for s in statuses}
        ops = [put_op(self.keys.status(name, s.host), _dump(s)) for s in statuses]
        hosts = sorted({s.host for s in statuses} & set(self._fences))  # the writer's own
        same = [Compare(self.keys.buffer(name), "CREATE", incarnation)] if incarnation else []
        step = _MAX_TXN_OPS - len(hosts) - len(same)  # room for the compares
        for start in range(0, len(ops), step):
            if not self._fenced_txn(hosts, same, ops[start : start + step]):
                raise Superseded(name)

    # -- what dead nodes owe ----------------------------------------------------------------

    def put_owed(self, owed: Owed) -> None:
        self.client.put(self.keys.owed(owed.node, owed.buffer), _dump(owed))

    def owed(self, node: str | None = None) -> list[Owed]:
        """Every node's debts (or one node's), in key order; a record that is not one is
        skipped (an admin sees it with etcdctl; dacd never acts on it)."""
        prefix = self.keys.owed_all + (f"{node}/" if node else "")
        kvs, _ = self.client.range(prefix, prefix_end(prefix))
        out = []
        for kv in kvs:
            try:
                out.append(_load(_m().Owed, kv))
            except BadRecord:
                continue
        return out

    def drop_owed(self, node: str, buffer: str | None = None) -> int:
        """Forget what `node` owes (for `buffer`, or all): how many records went."""
        if buffer is not None:
            return self.client.delete(self.keys.owed(node, buffer))
        prefix = f"{self.keys.owed_all}{node}/"
        return self.client.delete(prefix, prefix_end(prefix))

    def statuses(self, buffer: str) -> dict[str, Status]:
        return {s.host: s for s in self._list(_m().Status, self.keys.buffer_statuses(buffer))}

    def status_texts(self, buffer: str) -> dict[str, tuple[str, str]]:
        """Host -> (key, status as etcd holds it, unparsed): for dacd (see buffer_text)."""
        prefix = self.keys.buffer_statuses(buffer)
        kvs, _ = self.client.range(prefix, prefix_end(prefix))
        return {Keys.last(kv.key, prefix): (kv.key, kv.value) for kv in kvs}

    def status_docs(self, buffer: str) -> dict[str, dict]:
        """Host -> status as JSON, for the Slurm functions (see buffer_doc)."""
        prefix = self.keys.buffer_statuses(buffer)
        kvs, _ = self.client.range(prefix, prefix_end(prefix))
        return {Keys.last(kv.key, prefix): json.loads(kv.value) for kv in kvs}

    def all_status_docs(self) -> dict[str, dict[str, dict]]:
        """Buffer -> host -> status as JSON, in one read (dwstat's views of every buffer);
        a status that is not a JSON object is left out."""
        kvs, _ = self.client.range(self.keys.statuses, prefix_end(self.keys.statuses))
        found: dict[str, dict[str, dict]] = {}
        for kv in kvs:
            buffer, _, host = Keys.last(kv.key, self.keys.statuses).partition("/")
            doc = _doc(kv.value)
            if doc is not None and host:
                found.setdefault(buffer, {})[host] = doc
        return found

    # -- watch ---------------------------------------------------------------------------------

    def wake_on_status(self, buffer: str, wake: threading.Event) -> Watch:
        """Set `wake` whenever a host writes `buffer`'s status, until the returned Watch is
        closed: a waiting Slurm call learns a step ended at once, not at its next poll. Best
        effort (the waiter polls too), so a broken watch just stops waking."""
        prefix = self.keys.buffer_statuses(buffer)
        w = self.client.watch(prefix, prefix_end(prefix))

        def follow() -> None:
            try:
                for _ in w:
                    wake.set()
            except DacError:
                pass

        threading.Thread(target=follow, name=f"wake-{buffer}", daemon=True).start()
        return w

    def watch_buffers(self, start_revision: int = 0) -> tuple[Watch, Iterator[Change]]:
        """Every change to a buffer spec from `start_revision` on; the Watch closes it."""
        return self._watch(_m().Buffer, self.keys.buffers, start_revision)

    def watch_statuses(self, start_revision: int = 0) -> tuple[Watch, Iterator[Change]]:
        return self._watch(_m().Status, self.keys.statuses, start_revision)

    def _watch(
        self, model: type[R], prefix: str, start_revision: int
    ) -> tuple[Watch, Iterator[Change]]:
        w = self.client.watch(prefix, prefix_end(prefix), start_revision)

        def changes() -> Iterator[Change]:
            for ev in w:
                record = _load(model, ev.kv) if ev.type == "put" else None
                yield Change(Keys.last(ev.kv.key, prefix), record, ev.kv.mod_revision)

        return w, changes()

    # -- helpers -------------------------------------------------------------------------------

    def _list(self, model: type[R], prefix: str) -> list[R]:
        kvs, _ = self.client.range(prefix, prefix_end(prefix))
        return [_load(model, kv) for kv in kvs]

    def _update(
        self,
        model: type[R],
        key: str,
        change: Callable[[R | None], R],
        also: Callable[[R], Op] | None = None,
        guards: Callable[[R | None], list[Compare]] | None = None,
        attempts: int = 20,
    ) -> R:
        """Read-modify-write with compare-and-swap, retried when another writer got there
        first. `also(new)` is one more op committed in the same transaction; `guards(old)`
        are more compares, whose failure raises _GuardFailed instead of retrying."""
        for _ in range(attempts):
            kv = self.client.get(key)
            old = _load(model, kv) if kv else None
            new = change(old)
            cas = mod_is(key, kv.mod_revision) if kv else absent(key)
            extra = guards(old) if guards else []
            ops = [put_op(key, _dump(new))] + ([also(new)] if also else [])
            r = self.client.txn([cas] + extra, ops, [range_op(key, keys_only=True)])
            if r.succeeded:
                return new
            current = r.ranges[0][0].mod_revision if r.ranges and r.ranges[0] else 0
            if extra and current == (kv.mod_revision if kv else 0):
                raise _GuardFailed(extra)
        raise Conflict(f"{key} kept changing under {attempts} attempts to update it")


_Ref = namedtuple("_Ref", "host brick")


def _fingerprint(kvs: list[KV]) -> list[list]:
    return [[kv.key, kv.create_revision, kv.mod_revision] for kv in kvs]


def _claimant(kv: KV) -> str | None:
    """The buffer a claim key names; None when it is not a claim record."""
    c = _claim_of(kv)
    return c[0] if c else None


def _claim_of(kv: KV) -> tuple[str, str | None] | None:
    """(buffer, primary host or None) of a claim record; None when it is not one."""
    doc = _doc(kv.value)
    if doc is None or not isinstance(doc.get("buffer"), str):
        return None
    primary = doc.get("primary")
    return doc["buffer"], primary if isinstance(primary, str) else None


def _credential(directory: str, role: str, cache: bool):
    from daccore.etcd.auth import ROLES, Credential

    if role not in ROLES:
        raise ValueError(f"unknown etcd role '{role}' (choose {', '.join(ROLES)})")
    return Credential(f"{directory.rstrip('/')}/{role}", role, cache=cache)


def _dump(record: BaseModel) -> str:
    return record.model_dump_json()


def _load(model: type[R], kv: KV) -> R:
    from pydantic import ValidationError

    try:
        return model.model_validate_json(kv.value)
    except ValidationError as e:
        raise BadRecord(kv.key, model.__name__, e.errors()[0]["msg"]) from e


def _named(kvs: list[KV], prefix: str) -> list[bytes]:
    """The values of `kvs` that name their own key, as every record dac writes does (its
    first field): a record under another key (`hosts/x` holding host `dac1`'s record) would
    count a host or pool twice. A bytes comparison, not a parse: the pools hook reads these."""
    return [
        kv.value
        for kv in kvs
        if kv.value.startswith(b'{"name":"%s"' % key_bytes(Keys.last(kv.key, prefix)))
    ]


def _doc(value: bytes) -> dict | None:
    """A record read as plain JSON: the object, or None when it is not one (not JSON, not
    UTF-8, nested past the parser's depth: RecursionError is no ValueError)."""
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None
