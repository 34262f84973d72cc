"""dac's state in etcd: records in, records out. The only package that reads or writes keys.

Writers are unique per key (see `daccore.records.keys`); every read-modify-write compares the key's
mod_revision, and the allocation of a buffer is one transaction that creates the buffer and all
of its claim keys, or changes nothing.

One face, `Store`, composed of a class per concern, each in its own module and owning its keys:

    base        the etcd client and key layout, construction from the settings (`Connection`);
                the record helpers every concern uses (validate, dump, plain JSON,
                compare-and-swap, watch); `Versioned` and `Change`, the shapes reads return
    hosts       pools/, hosts/, capacity/: pools and hosts registered (`PoolsAndHosts`)
    leases      alive/ and owner-locks/: a dacd's lease and the fence it puts on its writes,
                who is alive, one owner's persistent buffers made at a time (`Leases`)
    work        work/: the wake-up keys every spec write puts for the hosts acting on it, so a
                dacd watches its own `work/<host>/`, not every spec (`WorkKeys`)
    inventory   the reads placement and the summaries make, at one revision (`InventoryReads`,
                `PlacementView`)
    claims      claims/, mgs/, intents/: a buffer created with all its claims or none, in
                chunks under an intent when it needs more than one transaction; claims
                released, intents recovered (`BrickClaims`, `AllocationConflict`)
    buffers     buffers/: specs read in three shapes, changed, deleted, watched (`BufferSpecs`)
    statuses    status/: what each host's dacd reports, fenced on its lease (`BufferStatuses`)
    owed        owed/: what a compute node dead at teardown still owes (`OwedMounts`)
    injob       stages/, stage-status/, stage-index/: stages a running job asked for, their
                statuses, the job's index of them (`InJobStages`)
    stageplans  stageplans/, stage-views/: a stage split across a buffer's servers, its plan
                fenced on the primary's lease; which mount namespace each dacd sees
                filesystems in (`StagePlans`)

The modules import only `base` and the concerns they build on (`buffers` deletes claims and
work keys and is fenced; `claims` puts work keys), never this face.
"""

from __future__ import annotations

from daccore.store.base import Change, Versioned
from daccore.store.buffers import BufferSpecs
from daccore.store.claims import CLAIMS_PER_TXN, INTENT_TTL, AllocationConflict, BrickClaims
from daccore.store.hosts import PoolsAndHosts
from daccore.store.injob import InJobStages
from daccore.store.inventory import InventoryReads, PlacementView
from daccore.store.leases import OWNER_LOCK_TTL, Leases
from daccore.store.owed import OwedMounts
from daccore.store.stageplans import StagePlans
from daccore.store.statuses import BufferStatuses
from daccore.store.work import WorkKeys

__all__ = [
    "Store",
    "Versioned",
    "Change",
    "PlacementView",
    "AllocationConflict",
    "CLAIMS_PER_TXN",
    "INTENT_TTL",
    "OWNER_LOCK_TTL",
]


class Store(
    BufferSpecs,
    BufferStatuses,
    InventoryReads,
    BrickClaims,
    WorkKeys,
    InJobStages,
    StagePlans,
    Leases,
    PoolsAndHosts,
    OwedMounts,
):
    """Typed access to dac's keys: every concern's methods on one object (the modules above
    say which owns what). Constructing one does no I/O."""
