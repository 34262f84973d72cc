"""What the pools hold right now, read at one etcd revision, and the per-pool summary that
`dacctl pools` and Slurm's pools hook print.

Two depths, because the two readers need different things (bench/pools_summary.py):

- the summary counts: it reads the small `capacity/<host>` index (bricks per pool, drained)
  instead of every brick, and has etcd count each pool's claims instead of listing them. At
  1,000 hosts x 24 bricks, parsing the full host records alone took 80-100 ms and listing the
  7,155 claim keys 16-58 ms, against a budget of 100 ms for the whole summary.
- the allocator places: it reads the full host records, and brick objects are built only for
  the pool asked for.

Both are built straight from the records' JSON rather than through the pydantic models: the
records were validated when they were written (`daccore.store`).
"""

from __future__ import annotations

import json
from collections import Counter, namedtuple

from daccore.errors import InternalError

TYPE_CHECKING = False  # typing's own, without importing typing on the pools hook; mypy: True
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from daccore.records.buffer_doc import Doc

__all__ = [
    "PoolInfo",
    "BrickInfo",
    "HostInfo",
    "HostView",
    "ClaimCounts",
    "Inventory",
    "PoolSummary",
    "summarize",
    "parse_pools",
    "parse_hosts",
    "views_of",
]


# namedtuples and plain classes, not dataclasses: `pools` runs inside slurmctld, and importing
# `dataclasses` plus defining these would cost ~25 ms of its budget (docs/performance.md).

PoolInfo = namedtuple("PoolInfo", "name granularity backend placement swap", defaults=(False,))


class BrickInfo(
    namedtuple("BrickInfo", "host name device capacity pool socket pcie_switch", defaults=(0, "0"))
):
    __slots__ = ()  # still a bare tuple: no dict per brick

    @classmethod
    def from_json(cls, host: str, brick: Doc) -> BrickInfo:
        """Host `host`'s brick from its record's JSON (a `Brick` in `Host.bricks`), with the
        model's defaults for what it leaves out."""
        return cls(
            host,
            brick["name"],
            brick.get("device", ""),
            brick["capacity"],
            brick["pool"],
            brick.get("socket", 0),
            brick.get("pcie_switch", "0"),
        )


#: One host as the summary sees it (a HostCapacity record, plus liveness).
HostView = namedtuple("HostView", "name alive drained pools")


class HostInfo:
    __slots__ = ("name", "alive", "drained", "bricks", "warnings")

    def __init__(
        self,
        name: str,
        alive: bool,
        drained: bool,
        bricks: list[BrickInfo] | None = None,
        warnings: list[str] | None = None,
    ):
        self.name, self.alive, self.drained = name, alive, drained
        self.bricks: list[BrickInfo] = bricks if bricks is not None else []
        self.warnings: list[str] = warnings if warnings is not None else []


class ClaimCounts:
    """How many bricks are claimed: per pool, and per (pool, host) for at least every host
    that is down or drained (the summary subtracts those)."""

    __slots__ = ("per_pool", "per_host")

    def __init__(
        self,
        per_pool: dict[str, int] | None = None,
        per_host: dict[tuple[str, str], int] | None = None,
    ):
        self.per_pool: dict[str, int] = per_pool if per_pool is not None else {}
        self.per_host: dict[tuple[str, str], int] = per_host if per_host is not None else {}


class Inventory:
    """A snapshot of the pools. `claimed` maps (host, brick) to the buffer holding it ("" when
    the claims were read keys-only). Built either with full hosts and claims (for placement),
    or with capacity views and claim counts only (for the summary)."""

    def __init__(
        self,
        pools: dict[str, PoolInfo],
        hosts: dict[str, HostInfo],
        claimed: dict[tuple[str, str], str],
        revision: int = 0,
    ):
        self.pools = pools
        self.claimed = claimed
        self.revision = revision
        #: buffers whose chunked allocation was cut short (daccore.store: intents)
        self.dead_intents: list[str] = []
        self._hosts: dict[str, HostInfo] | None = hosts
        self._raw: dict[str, Doc] | None = None
        self._alive: set[str] = set()
        self._views: list[HostView] | None = None
        self._counts: ClaimCounts | None = None
        self._summary: list[PoolSummary] | None = None

    @classmethod
    def from_json(
        cls,
        pools: list[bytes],
        alive: set[str],
        *,
        claims: dict[tuple[str, str, str], str] | None = None,
        hosts: list[bytes] | None = None,
        capacities: list[bytes] | None = None,
        counts: ClaimCounts | None = None,
        revision: int = 0,
    ) -> Inventory:
        """`claims` maps (pool, host, brick) to the buffer; `counts` stands in for it when the
        claims were counted rather than listed."""
        claims = claims or {}
        inv = cls(
            parse_pools(pools), {}, {(h, b): buf for (_, h, b), buf in claims.items()}, revision
        )
        inv._hosts, inv._alive = None, alive
        if hosts is not None:
            inv._raw = {h["name"]: h for h in parse_hosts(hosts)}
        if capacities is not None:
            inv._views = views_of(capacities, alive)
        if counts is None:
            counts = ClaimCounts()
            for pool, host, _ in claims:
                counts.per_pool[pool] = counts.per_pool.get(pool, 0) + 1
                counts.per_host[(pool, host)] = counts.per_host.get((pool, host), 0) + 1
        inv._counts = counts
        return inv

    @classmethod
    def of_counts(
        cls,
        pools: dict[str, PoolInfo],
        views: list[HostView],
        counts: ClaimCounts,
        revision: int = 0,
    ) -> Inventory:
        """A summary-only inventory: no bricks, so it cannot place."""
        inv = cls(pools, {}, {}, revision)
        inv._hosts = None
        inv._views, inv._counts = views, counts
        return inv

    @property
    def hosts(self) -> dict[str, HostInfo]:
        if self._hosts is None:
            self._hosts = {name: self._host(name) for name in self._records()}
        return self._hosts

    def _records(self) -> dict[str, Doc]:
        if self._raw is None:
            raise InternalError("this inventory was read without host records")
        return self._raw

    def _host(self, name: str, pool: str | None = None) -> HostInfo:
        h = self._records()[name]
        bricks = [
            BrickInfo.from_json(name, b)
            for b in h.get("bricks", ())
            if pool is None or b["pool"] == pool
        ]
        return HostInfo(
            name,
            name in self._alive,
            h.get("drained", False),
            bricks,
            [str(w) for w in h.get("warnings", ())],
        )

    def views(self) -> list[HostView]:
        if self._views is None:
            self._views = [
                HostView(h.name, h.alive, h.drained, dict(Counter(b.pool for b in h.bricks)))
                for h in self.hosts.values()
            ]
        return self._views

    def freeze_summary(self) -> Inventory:
        """This inventory, its `summarize` kept: for a holder that never changes it (the
        answerer's per-change inventory, which every pools and job_process answer reads)."""
        self._summary = summarize(self)
        return self

    def claim_counts(self) -> ClaimCounts:
        if self._counts is None:  # built from HostInfo and (host, brick) claims
            pool_of = {(h.name, b.name): b.pool for h in self.hosts.values() for b in h.bricks}
            counts = ClaimCounts()
            for host, brick in self.claimed:
                pool = pool_of.get((host, brick))
                if pool is not None:
                    counts.per_pool[pool] = counts.per_pool.get(pool, 0) + 1
                    counts.per_host[(pool, host)] = counts.per_host.get((pool, host), 0) + 1
            self._counts = counts
        return self._counts

    def claimed_by_host(self) -> dict[str, set[str]]:
        taken: dict[str, set[str]] = {}
        for host, brick in self.claimed:
            taken.setdefault(host, set()).add(brick)
        return taken

    def free_bricks(self, pool: str) -> dict[str, list[BrickInfo]]:
        """Unclaimed bricks of `pool` on live, undrained hosts, by host."""
        if self._hosts is not None:
            candidates = list(self._hosts.values())
        else:
            candidates = [
                self._host(name, pool)
                for name, h in self._records().items()
                if name in self._alive and not h.get("drained", False)
            ]
        taken = self.claimed_by_host()
        none: set[str] = set()
        free: dict[str, list[BrickInfo]] = {}
        for host in candidates:
            if not host.alive or host.drained:
                continue
            t = taken.get(host.name, none)
            mine = [b for b in host.bricks if b.pool == pool and b.name not in t]
            if mine:
                free[host.name] = mine
        return free


def parse_pools(pools: list[bytes]) -> dict[str, PoolInfo]:
    return {
        p["name"]: PoolInfo(
            p["name"],
            p["granularity"],
            p.get("backend", "local"),
            p.get("placement", "single_host"),
            p.get("swap", False),
        )
        for p in _loads_all(pools, _pool_ok)
    }


def parse_hosts(hosts: list[bytes]) -> list[Doc]:
    """Host records as plain JSON, those of a host record's shape."""
    return _loads_all(hosts, _host_ok)


def views_of(capacities: list[bytes], alive: set[str]) -> list[HostView]:
    """HostViews from HostCapacity records."""
    return [
        HostView(c["name"], c["name"] in alive, c.get("drained", False), c.get("pools", {}))
        for c in _loads_all(capacities, _capacity_ok)
    ]


def _loads_all(values: list[bytes], ok: Callable[[Doc], bool] | None = None) -> list[Doc]:
    """The records that are JSON objects of the right shape (`ok`); any other is left out, as
    a pool or host no dacd registered: a record no dac writer wrote (dacd's log and the admin
    commands name it) must not stop the pools hook, job_process or placement for every job."""
    # One json.loads over all records is several times faster than one call per record.
    try:
        docs = json.loads(b"[" + b",".join(values) + b"]") if values else []
    except (ValueError, RecursionError):
        docs = []
    if len(docs) != len(values):  # a bad one: each on its own ('1},{' would make two)
        docs = [_loads(v) for v in values]
    return [
        d
        for d in docs
        if isinstance(d, dict) and isinstance(d.get("name"), str) and (ok is None or ok(d))
    ]


def _loads(value: bytes) -> Any:
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return None


def _pool_ok(p: Doc) -> bool:
    return (
        type(p.get("granularity")) is int
        and p["granularity"] > 0
        and all(isinstance(p.get(f, ""), str) for f in ("backend", "placement"))
    )


def _capacity_ok(c: Doc) -> bool:
    pools = c.get("pools", {})
    return (
        isinstance(c.get("drained", False), bool)
        and isinstance(pools, dict)
        and all(type(n) is int and n >= 0 for n in pools.values())
    )


def _host_ok(h: Doc) -> bool:
    bricks = h.get("bricks", [])
    return (
        isinstance(h.get("drained", False), bool)
        and isinstance(bricks, list)
        and all(
            isinstance(b, dict)
            and all(isinstance(b.get(f), str) for f in ("name", "pool"))
            and type(b.get("capacity")) is int
            for b in bricks
        )
    )


class PoolSummary(
    namedtuple(
        "PoolSummary",
        "name backend granularity total free used hosts_up hosts_down hosts_drained swap",
    )
):
    """Brick counts of one pool. total = bricks on live hosts; used = the claimed ones among
    them; free = unclaimed on live, undrained hosts (so drained bricks are neither)."""

    __slots__ = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "backend": self.backend,
            "granularity": self.granularity,
            "total_bricks": self.total,
            "free_bricks": self.free,
            "used_bricks": self.used,
            "total_bytes": self.total * self.granularity,
            "free_bytes": self.free * self.granularity,
            "used_bytes": self.used * self.granularity,
            "hosts_up": self.hosts_up,
            "hosts_down": self.hosts_down,
            "hosts_drained": self.hosts_drained,
            "swap": self.swap,
        }


def summarize(inv: Inventory) -> list[PoolSummary]:
    """One summary per pool, sorted by name."""
    if inv._summary is not None:
        return list(inv._summary)
    names = inv.pools
    counts = inv.claim_counts()
    total: Counter[str] = Counter()
    live_undrained: Counter[str] = Counter()
    up: Counter[str] = Counter()
    down: Counter[str] = Counter()
    drained: Counter[str] = Counter()
    down_claims: Counter[str] = Counter()
    drained_claims: Counter[str] = Counter()
    for h in inv.views():
        for pool, n in h.pools.items():
            if pool not in names:
                continue  # bricks of a pool no dacd has registered (yet)
            claimed = counts.per_host.get((pool, h.name), 0)
            if not h.alive:
                down[pool] += 1
                down_claims[pool] += claimed
                continue
            up[pool] += 1
            total[pool] += n
            if h.drained:
                drained[pool] += 1
                drained_claims[pool] += claimed
            else:
                live_undrained[pool] += n
    out = []
    for name, p in sorted(names.items()):
        used = counts.per_pool.get(name, 0) - down_claims[name]
        free = live_undrained[name] - (used - drained_claims[name])
        out.append(
            PoolSummary(
                name,
                p.backend,
                p.granularity,
                total[name],
                free,
                used,
                up[name],
                down[name],
                drained[name],
                p.swap,
            )
        )
    return out
