"""What the pools hold right now: hosts, liveness, drain flags, bricks and claims, read at one
etcd revision, plus the per-pool summary that `dacctl pools` and Slurm's pools hook print.

Built straight from the records' JSON rather than through the pydantic models: `pools` runs
inside slurmctld (budget: a few interpreter start-ups, docs/performance.md), and validating
24,000 bricks through pydantic would cost more than the whole budget. The records were validated
when they were written (`daccore.store`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

__all__ = ["PoolInfo", "BrickInfo", "HostInfo", "Inventory", "PoolSummary", "summarize"]


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


@dataclass(slots=True)
class Inventory:
    pools: dict[str, PoolInfo]
    hosts: dict[str, HostInfo]
    #: (host, brick) -> buffer name ("" when read keys-only)
    claimed: dict[tuple[str, str], str]
    revision: int = 0

    @classmethod
    def from_json(cls, pools: list[bytes], hosts: list[bytes], alive: set[str],
                  claimed: dict[tuple[str, str], str], revision: int = 0) -> Inventory:
        pool_infos = {}
        for raw in pools:
            p = json.loads(raw)
            pool_infos[p["name"]] = PoolInfo(p["name"], p["granularity"], p.get("backend", "local"),
                                             p.get("placement", "single_host"))
        host_infos = {}
        for raw in hosts:
            h = json.loads(raw)
            name = h["name"]
            bricks = [BrickInfo(name, b["name"], b["device"], b["capacity"], b["pool"],
                                b.get("socket", 0), b.get("pcie_switch", "0"))
                      for b in h.get("bricks", ())]
            host_infos[name] = HostInfo(name, name in alive, h.get("drained", False), bricks)
        return cls(pool_infos, host_infos, claimed, revision)

    def free_bricks(self, pool: str) -> dict[str, list[BrickInfo]]:
        """Unclaimed bricks of `pool` on live, undrained hosts, by host."""
        claimed = self.claimed
        free: dict[str, list[BrickInfo]] = {}
        for host in self.hosts.values():
            if not host.alive or host.drained:
                continue
            mine = [b for b in host.bricks if b.pool == pool and (b.host, b.name) not in claimed]
            if mine:
                free[host.name] = mine
        return free


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
    counts = {name: [0, 0, 0, set(), set(), set()] for name in inv.pools}
    claimed = inv.claimed
    for host in inv.hosts.values():
        for b in host.bricks:
            c = counts.get(b.pool)
            if c is None:
                continue  # a brick of a pool no dacd has registered (yet)
            if not host.alive:
                c[4].add(host.name)
                continue
            c[3].add(host.name)
            if host.drained:
                c[5].add(host.name)
            c[0] += 1
            if (host.name, b.name) in claimed:
                c[2] += 1
            elif not host.drained:
                c[1] += 1
    out = []
    for name in sorted(inv.pools):
        p, (total, free, used, up, down, drained) = inv.pools[name], counts[name]
        out.append(PoolSummary(name, p.backend, p.granularity, total, free, used,
                               len(up), len(down), len(drained)))
    return out
