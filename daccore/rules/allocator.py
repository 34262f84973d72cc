"""Placement: which free bricks a new buffer gets. Pure: no etcd, no clock, no I/O.

The count is the capacity rounded up to the pool's granularity. Bricks come only from live,
undrained hosts and are never already claimed. Policies:

- single_host: all bricks on one server (the local backend builds one filesystem from them).
  Best fit: the host with the fewest free bricks that still fits, to keep big hosts for big
  requests.
- across_servers: spread over servers first (Lustre, DAOS: bandwidth scales with servers).

On a pool of more than SAMPLE_HOSTS hosts, an allocation counts the free bricks of a random
sample of them only (`sample`, "power of d choices": each count is an etcd range, and at
1,000 servers counting every host was most of etcd's cost of a setup). The single_host best
fit is then the best fit within the sample, and across_servers takes the emptiest servers of
the sample. A sample that cannot hold the request, or would give a server a second brick
across servers (`crowded`), is widened to every host (daccore.services.buffers): a CapacityError
always comes from every host's count, with the same message as without sampling.

Within a host, bricks spread over (socket, PCIe switch) groups before a group is used twice:
the reference architecture saw about 5 NVMe saturate one PCIe switch.

Access mode plays no part: striped and private differ in the layout inside the buffer, not in
which bricks hold it (as in DataWarp). `rng` breaks ties, so that concurrent allocators working
from the same snapshot pick different bricks and rarely collide in the claim transaction.
"""

from __future__ import annotations

import random

from daccore.errors import CapacityError, NotFound, UserError
from daccore.records.models import PlacementPolicy
from daccore.rules.inventory import BrickInfo, Inventory, PoolInfo
from daccore.units import bricks_needed, format_size

__all__ = ["place", "plan", "pick", "sample", "crowded", "SAMPLE_HOSTS", "SAMPLE_HEADROOM"]

#: The fewest hosts a sample has (all of them on a smaller pool): one transaction of count
#: ranges (100 at most). Measured at 1,000 servers (docs/performance.md, Scale).
SAMPLE_HOSTS = 64
#: Hosts sampled per brick asked for, so that across servers each brick nearly always finds a
#: server of its own in the sample, even in a pool mostly claimed.
SAMPLE_HEADROOM = 4


def place(
    inv: Inventory,
    capacity: int,
    pool: str,
    policy: str | None = None,
    rng: random.Random | None = None,
    busy_mgs: set[str] | None = None,
) -> list[BrickInfo]:
    """The bricks for a buffer of `capacity` bytes in `pool`, or CapacityError saying why.

    With `busy_mgs` (the buffer runs its own Lustre MGS on its primary, and these hosts already
    run one: Lustre allows one per server), the first brick, whose host is the primary, is on a
    host not in it."""
    rng = rng or random.Random(0)
    free = inv.free_bricks(pool) if pool in inv.pools else {}
    counts = {h: len(b) for h, b in free.items()}
    return [
        b
        for h, k in plan(inv.pools, counts, capacity, pool, policy, rng, busy_mgs).items()
        for b in pick(free[h], k, rng)
    ]


def plan(
    pools: dict[str, PoolInfo],
    free: dict[str, int],
    capacity: int,
    pool: str,
    policy: str | None = None,
    rng: random.Random | None = None,
    busy_mgs: set[str] | None = None,
) -> dict[str, int]:
    """How many bricks to take from which host, from each host's count of free bricks alone
    (`free`: live, undrained hosts with a free brick of `pool`); the primary host first. Then
    `pick` chooses the bricks within each host: a site of 1,000 servers needs the bricks of
    the chosen hosts only (daccore.store.Store.free_bricks_on)."""
    info = pools.get(pool)
    if info is None:
        known = ", ".join(sorted(pools)) or "none registered"
        raise NotFound(f"unknown pool '{pool}' (pools: {known})")
    if capacity <= 0:
        raise UserError(f"capacity must be greater than zero, not {capacity}")
    try:
        policy = PlacementPolicy(policy or info.placement)
    except ValueError:
        choices = ", ".join(p.value for p in PlacementPolicy)
        raise UserError(f"unknown placement '{policy}' (choose {choices})") from None
    rng = rng or random.Random(0)
    n = bricks_needed(capacity, info.granularity)
    unit = format_size(info.granularity)
    if busy_mgs is not None and not set(free) - busy_mgs:
        raise CapacityError(
            f"every server of pool '{pool}' with free bricks already runs "
            "another buffer's Lustre MGS (one per server); retry when one ends, "
            "or have the site use a shared MGS"
        )
    if policy is PlacementPolicy.SINGLE_HOST:
        fits = [h for h, k in free.items() if k >= n]
        if busy_mgs is not None:
            fits = [h for h in fits if h not in busy_mgs]
        if not fits:
            most = max(free.values(), default=0)
            raise CapacityError(
                f"no host in pool '{pool}' has {_bricks(n)} of {unit} free "
                f"(the most on one host is {most}); this pool keeps a buffer on one host"
            )
        least = min(free[h] for h in fits)
        return {rng.choice(sorted(h for h in fits if free[h] == least)): n}
    available = sum(free.values())
    if available < n:
        raise CapacityError(
            f"pool '{pool}' has {_bricks(available)} of {unit} free; "
            f"the request needs {n} ({format_size(n * info.granularity)})"
        )
    hosts = list(free)
    rng.shuffle(hosts)
    hosts.sort(key=lambda h: -free[h])  # stable: random among equals
    if busy_mgs is not None:  # the primary first: the fullest host that can run the MGS
        lead = next(h for h in hosts if h not in busy_mgs)
        hosts.remove(lead)
        hosts.insert(0, lead)
    return {
        h: k for h, k in zip(hosts, _round_robin([free[h] for h in hosts], n), strict=True) if k
    }


def sample(
    pools: dict[str, PoolInfo], bricks: dict[str, int], capacity: int, pool: str, rng: random.Random
) -> list[str]:
    """The hosts whose free bricks an allocation counts, of the candidates `bricks` (live,
    undrained hosts with bricks in `pool`): SAMPLE_HOSTS of them at random, or SAMPLE_HEADROOM
    per brick asked for if more; all of them on a smaller pool (a 2,048-brick buffer counts
    every host of a pool of 1,000)."""
    info = pools.get(pool)
    if info is None or capacity <= 0:
        return list(bricks)  # plan refuses, with its own message
    n = max(SAMPLE_HOSTS, SAMPLE_HEADROOM * bricks_needed(capacity, info.granularity))
    if n >= len(bricks):
        return list(bricks)
    return rng.sample(sorted(bricks), n)


def crowded(
    pools: dict[str, PoolInfo], hosts: dict[str, int], pool: str, policy: str | None = None
) -> bool:
    """Whether `plan`'s choice `hosts` gave a server a second brick across servers: from a
    sample, the hosts left out may still have none of the buffer and a brick free."""
    placement = PlacementPolicy(policy or pools[pool].placement)
    return placement is PlacementPolicy.ACROSS_SERVERS and max(hosts.values(), default=0) > 1


def pick(bricks: list[BrickInfo], n: int, rng: random.Random) -> list[BrickInfo]:
    """`n` of one host's free `bricks`, spread over its (socket, PCIe switch) groups."""
    return _spread_within_host(bricks, n, rng)


def _bricks(n: int) -> str:
    return f"{n} brick" if n == 1 else f"{n} bricks"


def _spread_within_host(bricks: list[BrickInfo], n: int, rng: random.Random) -> list[BrickInfo]:
    if n >= len(bricks):
        return list(bricks)
    if n == 1:
        return [rng.choice(bricks)]
    groups: dict[tuple[int, str], list[BrickInfo]] = {}
    for b in bricks:
        groups.setdefault((b.socket, b.pcie_switch), []).append(b)
    if len(groups) == 1:
        return rng.sample(bricks, n)
    ordered = list(groups.values())
    rng.shuffle(ordered)
    ordered.sort(key=len, reverse=True)  # stable: random among equals
    # Sockets take turns, biggest group first within a turn, so a partial round spreads over
    # sockets as well as switches.
    turns: dict[int, int] = {}
    keyed = []
    for g in ordered:
        socket = g[0].socket
        turns[socket] = turns.get(socket, -1) + 1
        keyed.append((turns[socket], g))
    keyed.sort(key=lambda t: t[0])
    if n <= len(keyed):  # one brick from each of the first n groups
        return [rng.choice(g) for _, g in keyed[:n]]
    for g in ordered:
        rng.shuffle(g)
    chosen: list[BrickInfo] = []
    for level in range(len(ordered[0])):
        for _, g in keyed:
            if level < len(g):
                chosen.append(g[level])
                if len(chosen) == n:
                    return chosen
    return chosen


def _round_robin(counts: list[int], n: int) -> list[int]:
    """How many to take from each group: one per group per round, in the given order, until n.

    No group gets a second item while another group still has one left in the same round, so
    the counts differ by at most one wherever a group is not exhausted.
    """
    taken = [0] * len(counts)
    remaining, level = n, 0
    while remaining:
        active = [i for i, c in enumerate(counts) if c > level]
        if not active:
            break
        if len(active) > remaining:
            active = active[:remaining]
        for i in active:
            taken[i] += 1
        remaining -= len(active)
        level += 1
    return taken
