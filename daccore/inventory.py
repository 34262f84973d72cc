"""What the pools hold right now, read at one etcd revision, and the per-pool summary that
`dacctl pools` and Slurm's pools hook print.

Two depths, because the two readers need different things (bench/pools_summary.py):

- the summary counts: it reads the small `capacity/<host>` index (bricks per pool, drained)
  instead of every brick. At 1,000 hosts x 24 bricks, parsing the full host records alone
  took 80-100 ms, the whole budget of the summary.
- the allocator places: it reads the full host records, and brick objects are built only for
  the pool asked for.

Both are built straight from the records' JSON rather than through the pydantic models: the
records were validated when they were written (`daccore.store`).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from daccore.errors import InternalError

__all__ = ["PoolInfo", "BrickInfo", "HostInfo", "HostView", "Inventory", "PoolSummary",
           "summarize"]


@dataclass(frozen=True, slots=True)
class PoolInfo:
    name: str
    granularity: int
    backend: str
    placement: str


@dataclass(frozen=True, slots=True)
class BrickInfo:
    host: str
    name: str
    device: str
    capacity: int
    pool: str
    socket: int = 0
    pcie_switch: str = "0"


@dataclass(slots=True)
class HostInfo:
    name: str
    alive: bool
    drained: bool
    bricks: list[BrickInfo] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class HostView:
    """One host as the summary sees it (the shape of a HostCapacity record, plus liveness)."""

    name: str
    alive: bool
    drained: bool
    pools: dict[str, int]
    brick_pools: dict[str, str]  # empty unless the host serves several pools


class Inventory:
    """A snapshot of the pools. `claimed` maps (host, brick) to the buffer holding it ("" when
    the claims were read keys-only). Built either with full hosts (`hosts`, or `from_json`
    with host records) or with capacity views only (`from_json` with capacity records)."""

    def __init__(self, pools: dict[str, PoolInfo], hosts: dict[str, HostInfo],
                 claimed: dict[tuple[str, str], str], revision: int = 0):
        self.pools = pools
        self.claimed = claimed
        self.revision = revision
        self._hosts: dict[str, HostInfo] | None = hosts
        self._raw: dict[str, dict] | None = None
        self._alive: set[str] = set()
        self._views: list[HostView] | None = None

    @classmethod
    def from_json(cls, pools: list[bytes], alive: set[str], claimed: dict[tuple[str, str], str],
                  *, hosts: list[bytes] | None = None, capacities: list[bytes] | None = None,
                  revision: int = 0) -> Inventory:
        pool_infos = {}
        for p in _loads_all(pools):
            pool_infos[p["name"]] = PoolInfo(p["name"], p["granularity"], p.get("backend", "local"),
                                             p.get("placement", "single_host"))
        inv = cls(pool_infos, {}, claimed, revision)
        inv._hosts, inv._alive = None, alive
        if hosts is not None:
            inv._raw = {h["name"]: h for h in _loads_all(hosts)}
        if capacities is not None:
            inv._views = [HostView(c["name"], c["name"] in alive, c.get("drained", False),
                                   c.get("pools", {}), c.get("brick_pools", {}))
                          for c in _loads_all(capacities)]
        return inv

    @property
    def hosts(self) -> dict[str, HostInfo]:
        if self._hosts is None:
            self._hosts = {name: self._host(name) for name in self._records()}
        return self._hosts

    def _records(self) -> dict[str, dict]:
        if self._raw is None:
            raise InternalError("this inventory was read without host records")
        return self._raw

    def _host(self, name: str, pool: str | None = None) -> HostInfo:
        h = self._records()[name]
        bricks = [BrickInfo(name, b["name"], b["device"], b["capacity"], b["pool"],
                            b.get("socket", 0), b.get("pcie_switch", "0"))
                  for b in h.get("bricks", ()) if pool is None or b["pool"] == pool]
        return HostInfo(name, name in self._alive, h.get("drained", False), bricks)

    def views(self) -> list[HostView]:
        if self._views is None:
            views = []
            for h in self.hosts.values():
                pools = Counter(b.pool for b in h.bricks)
                brick_pools = {b.name: b.pool for b in h.bricks} if len(pools) > 1 else {}
                views.append(HostView(h.name, h.alive, h.drained, dict(pools), brick_pools))
            self._views = views
        return self._views

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
            candidates = [self._host(name, pool) for name, h in self._records().items()
                          if name in self._alive and not h.get("drained", False)]
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


def _loads_all(values: list[bytes]) -> list[dict]:
    # One json.loads over all records is several times faster than one call per record.
    return json.loads(b"[" + b",".join(values) + b"]") if values else []


@dataclass(frozen=True, slots=True)
class PoolSummary:
    """Brick counts of one pool. total = bricks on live hosts; used = the claimed ones among
    them; free = unclaimed on live, undrained hosts (so drained bricks are neither)."""

    name: str
    backend: str
    granularity: int
    total: int
    free: int
    used: int
    hosts_up: int
    hosts_down: int
    hosts_drained: int

    def as_dict(self) -> dict:
        return {
            "name": self.name, "backend": self.backend, "granularity": self.granularity,
            "total_bricks": self.total, "free_bricks": self.free, "used_bricks": self.used,
            "total_bytes": self.total * self.granularity,
            "free_bytes": self.free * self.granularity,
            "used_bytes": self.used * self.granularity,
            "hosts_up": self.hosts_up, "hosts_down": self.hosts_down,
            "hosts_drained": self.hosts_drained,
        }


def summarize(inv: Inventory) -> list[PoolSummary]:
    """One summary per pool, sorted by name."""
    names = inv.pools
    total: Counter[str] = Counter()
    free: Counter[str] = Counter()
    used: Counter[str] = Counter()
    up: Counter[str] = Counter()
    down: Counter[str] = Counter()
    drained: Counter[str] = Counter()
    taken = inv.claimed_by_host()
    none: set[str] = set()
    for h in inv.views():
        if not h.alive:
            down.update(p for p in h.pools if p in names)
            continue
        mine = taken.get(h.name, none)
        if h.brick_pools:
            claimed = Counter(h.brick_pools[b] for b in mine if b in h.brick_pools)
        else:
            claimed = Counter({p: len(mine) for p in h.pools}) if mine else Counter()
        for pool, n in h.pools.items():
            if pool not in names:
                continue  # bricks of a pool no dacd has registered (yet)
            up[pool] += 1
            total[pool] += n
            used[pool] += claimed[pool]
            if h.drained:
                drained[pool] += 1
            else:
                free[pool] += n - claimed[pool]
    return [PoolSummary(name, p.backend, p.granularity, total[name], free[name], used[name],
                        up[name], down[name], drained[name])
            for name, p in sorted(names.items())]
