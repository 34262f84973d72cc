"""Creating a buffer: place it on free bricks, then claim them in one transaction (a buffer of
more bricks than one etcd transaction may hold: in chunks under an intent, Store.create_buffer).

No global lock: each attempt reads the inventory at one revision, places the buffer (pure),
and commits only if every chosen claim key is still absent. A loser re-reads and places again;
when the pool no longer has room it gets the allocator's CapacityError. An intent whose
allocating call died is rolled back first, by whichever allocation finds it.

Each attempt counts the free bricks of a random sample of the pool's hosts only
(`allocator.sample`); when the sample cannot hold the buffer, or would give a server a second
brick across servers, the rest are counted at the same revision before placing again, so a
refusal is never the sample's.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Callable

from daccore.errors import CapacityError
from daccore.gcpause import gc_paused
from daccore.records.models import Allocation, BrickRef, Buffer
from daccore.rules.allocator import crowded, pick, plan, sample
from daccore.rules.inventory import BrickInfo, PoolInfo
from daccore.store import AllocationConflict, PlacementView, Store

log = logging.getLogger(__name__)

__all__ = ["allocate_buffer", "allocation_of"]

#: Enough for 20 allocators racing on one pool (bench/alloc_storm.py); each retry re-reads.
MAX_ATTEMPTS = 25


def allocation_of(bricks: list[BrickInfo], own_mgs: bool = False) -> Allocation:
    """The allocation record for chosen bricks; the first brick's host is the primary, and
    with `own_mgs` holds the buffer's Lustre MGS."""
    return Allocation(
        primary_host=bricks[0].host,
        mgs_host=bricks[0].host if own_mgs else None,
        bricks=[
            BrickRef(host=b.host, brick=b.name, device=b.device, capacity=b.capacity)
            for b in bricks
        ],
    )


def _plan(
    store: Store,
    view: PlacementView,
    capacity: int,
    pool: str,
    policy: str | None,
    rng: random.Random,
    busy: set[str] | None,
) -> tuple[PlacementView, dict[str, int]]:
    """`plan` from the view's sample of hosts; from every host's count when the sample
    refuses the buffer or crowds it, so that a refusal and its message are the pool's."""
    if view.uncounted:
        try:
            hosts = plan(view.pools, view.free, capacity, pool, policy, rng, busy)
            if not crowded(view.pools, hosts, pool, policy):
                return view, hosts
        except CapacityError:
            pass
        view = store.count_rest(pool, view)
    return view, plan(view.pools, view.free, capacity, pool, policy, rng, busy)


def allocate_buffer(
    store: Store,
    make: Callable[[Allocation], Buffer],
    *,
    capacity: int,
    pool: str,
    policy: str | None = None,
    rng: random.Random | None = None,
    own_mgs: bool = False,
) -> tuple[Buffer, int]:
    """Create the buffer `make(allocation)` on free bricks of `pool`; with `own_mgs`, its
    primary host's MGS slot too.

    Returns (buffer, mod_revision). Raises CapacityError when the pool has no room, UserError
    when a buffer of that name exists.
    """
    rng = rng or random.Random()

    def sampled(pools: dict[str, PoolInfo], bricks: dict[str, int]) -> list[str]:
        return sample(pools, bricks, capacity, pool, rng)

    for attempt in range(1, MAX_ATTEMPTS + 1):
        busy = store.mgs_hosts() if own_mgs else None
        view = store.placement_view(pool, sampled)
        if view.dead_intents:  # a big allocation cut short: its claims go first
            log.info("rolling back the allocations of %s, cut short", ", ".join(view.dead_intents))
            store.recover_intents(view.dead_intents)
            view = store.placement_view(pool, sampled)
        # hosts first, from counts; then the bricks of the chosen hosts, read at the same
        # revision (allocator.plan, allocator.pick)
        view, hosts = _plan(store, view, capacity, pool, policy, rng, busy)
        free = store.free_bricks_on(pool, list(hosts), view.revision)
        with gc_paused():
            bricks = [b for h, k in hosts.items() for b in pick(free[h], k, rng)]
        buffer = make(allocation_of(bricks, own_mgs))
        try:
            return buffer, store.create_buffer(buffer)
        except AllocationConflict:
            log.debug(
                "buffer %s: claim conflict on attempt %d, placing again", buffer.name, attempt
            )
            time.sleep(rng.uniform(0, 0.005 * attempt))
    raise CapacityError(
        f"pool '{pool}' is too busy: {MAX_ATTEMPTS} attempts to claim bricks "
        "for the buffer lost to other buffers; retry"
    )
