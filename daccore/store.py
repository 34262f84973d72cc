"""dac's state in etcd: records in, records out. The only module that reads or writes keys.

Writers are unique per key (see `daccore.keys`); every read-modify-write compares the key's
mod_revision, and the allocation of a buffer is one transaction that creates the buffer and all
of its claim keys, or changes nothing.
"""

from __future__ import annotations

import json
import threading
from collections import namedtuple
from typing import TYPE_CHECKING

from daccore.errors import AdminError, Conflict, DacError, InternalError, NotFound, UserError
from daccore.etcd.client import EtcdClient
from daccore.etcd.types import KV, Compare, Op, absent, delete_op, mod_is, put_op, range_op
from daccore.gcpause import gc_paused
from daccore.inventory import ClaimCounts, Inventory, parse_pools, views_of
from daccore.keys import Keys, prefix_end

if TYPE_CHECKING:
    from typing import Callable, Iterator, TypeVar

    from pydantic import BaseModel

    from daccore.config import EtcdSettings
    from daccore.etcd.stream import LeaseKeeper, Watch
    from daccore.models import Buffer, Host, Pool, Status
    R = TypeVar("R", bound=BaseModel)

__all__ = ["Store", "Versioned", "Change", "AllocationConflict"]


def _m():
    """The record models, imported on first use: pydantic costs ~150 ms to import, and the
    Slurm hooks that run inside slurmctld read what they need without it (`*_json` methods)."""
    from daccore import models
    return models

#: etcd refuses transactions of more than --max-txn-ops operations (default 128).
_MAX_TXN_OPS = 100


class _GuardFailed(Exception):
    def __init__(self, compares: list[Compare]):
        self.compares = compares


class AllocationConflict(Conflict):
    """Another buffer claimed one of the chosen bricks first: re-read and place again."""


#: A record with the mod_revision to compare against when writing it back.
Versioned = namedtuple("Versioned", "record mod_revision")
#: One event of a watch: `record` is None when the key was deleted.
Change = namedtuple("Change", "name record revision")


class Store:
    """Typed access to dac's keys. Constructing one does no I/O."""

    def __init__(self, client: EtcdClient, prefix: str = "/dac/v1/"):
        self.client = client
        self.keys = Keys(prefix)

    @classmethod
    def from_settings(cls, etcd: EtcdSettings, transport: str | None = None,
                      role: str = "admin") -> Store:
        """`transport` overrides the configured one; `role` is the etcd identity to act as:
        dacd (storage servers), slurm (the Slurm hooks), admin (root on admin hosts)."""
        client = EtcdClient(etcd.urls, cacert=etcd.cacert, cert=etcd.cert, key=etcd.key,
                            timeout=etcd.timeout, transport=transport or etcd.transport,
                            credential=_credential(etcd.credentials_dir, role, cache=False))
        return cls(client, etcd.prefix)

    @classmethod
    def from_dict(cls, etcd: dict, transport: str | None = None,
                  max_timeout: float | None = None, role: str = "slurm") -> Store:
        """From `config_cache.load_settings()["etcd"]`, for the hooks inside slurmctld: one
        process per call, so the role's token is cached on disk (daccore.etcd.auth)."""
        timeout = etcd["timeout"] if max_timeout is None else min(etcd["timeout"], max_timeout)
        client = EtcdClient(etcd["urls"], cacert=etcd.get("cacert"), cert=etcd.get("cert"),
                            key=etcd.get("key"), timeout=timeout,
                            transport=transport or etcd["transport"],
                            credential=_credential(etcd["credentials_dir"], role, cache=True))
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
                f"delete the pool once no buffer uses it")
        return existing

    def pools(self) -> dict[str, Pool]:
        return {p.name: p for p in self._list(_m().Pool, self.keys.pools)}

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
            return [absent(k.claim(b.pool, host.name, b.name)) for b in (old.bricks if old else ())
                    if now.get(b.name) != b.pool]
        try:
            return self._update(_m().Host, k.host(host.name), change, self._capacity_op, still_free)
        except _GuardFailed as e:
            held = {kv.key: _load(_m().BrickClaim, kv).buffer
                    for c in e.compares if (kv := self.client.get(c.key))}
            if not held:
                raise Conflict(f"host '{host.name}' kept changing while registering") from None
            key, buffer = sorted(held.items())[0]
            pool, _, brick = k.parse_claim(key)
            raise AdminError(f"host '{host.name}': brick '{brick}' is held by buffer "
                             f"'{buffer}' in pool '{pool}'; it cannot leave that pool until "
                             "the buffer is torn down") from None

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

    def keep_alive(self, host: str, ttl: int) -> LeaseKeeper:
        """Start keeping `alive/<host>` on a lease; returns once the key exists."""
        from daccore.etcd.stream import LeaseKeeper
        key = self.keys.alive_key(host)
        def bind(lease: int) -> None:
            self.client.put(key, "", lease)
        return LeaseKeeper(self.client, ttl, bind, name=f"lease-{host}").start()

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

    def alive(self) -> set[str]:
        kvs, _ = self.client.range(self.keys.alive, prefix_end(self.keys.alive), keys_only=True)
        return {Keys.last(kv.key, self.keys.alive) for kv in kvs}

    # -- inventory -----------------------------------------------------------------------------

    def inventory(self, claim_owners: bool = False) -> Inventory:
        """Pools, full host records, liveness and every claim, at one revision: for placement."""
        k = self.keys
        with gc_paused():
            r = self.client.txn([], [  # one read-only txn: every range at the same revision
                range_op(k.pools, prefix_end(k.pools)),
                range_op(k.hosts, prefix_end(k.hosts)),
                range_op(k.alive, prefix_end(k.alive), keys_only=True),
                range_op(k.claims, prefix_end(k.claims), keys_only=not claim_owners),
            ])
            pools, hosts, alive, claims = r.ranges
            owner = (lambda kv: json.loads(kv.value)["buffer"]) if claim_owners else \
                (lambda kv: "")
            return Inventory.from_json(
                [kv.value for kv in pools], {Keys.last(kv.key, k.alive) for kv in alive},
                claims={k.parse_claim(kv.key): owner(kv) for kv in claims},
                hosts=[kv.value for kv in hosts], revision=r.revision)

    def summary_inventory(self) -> Inventory:
        """Enough to `summarize`, several times cheaper than `inventory` on a big site: the
        capacity indexes instead of the host records, and claims counted by etcd, per pool and
        for each down or drained host, instead of listed. Two reads, both at one revision."""
        k = self.keys
        with gc_paused():
            r = self.client.txn([], [
                range_op(k.pools, prefix_end(k.pools)),
                range_op(k.capacities, prefix_end(k.capacities)),
                range_op(k.alive, prefix_end(k.alive), keys_only=True),
            ])
            pools, capacities, alive = r.ranges
            pool_infos = parse_pools([kv.value for kv in pools])
            views = views_of([kv.value for kv in capacities],
                             {Keys.last(kv.key, k.alive) for kv in alive})
            wanted = [(p, None) for p in pool_infos] + [
                (p, v.name) for v in views if not v.alive or v.drained for p in v.pools
                if p in pool_infos]
            counts = ClaimCounts()
            for start in range(0, len(wanted), _MAX_TXN_OPS):
                chunk = wanted[start:start + _MAX_TXN_OPS]
                ops = []
                for pool, host in chunk:
                    prefix = k.host_claims(pool, host) if host else k.pool_claims(pool)
                    ops.append(range_op(prefix, prefix_end(prefix), count_only=True,
                                        revision=r.revision))
                for (pool, host), n in zip(chunk, self.client.txn([], ops).counts, strict=True):
                    if host:
                        counts.per_host[(pool, host)] = n
                    else:
                        counts.per_pool[pool] = n
            return Inventory.of_counts(pool_infos, views, counts, r.revision)

    def host_summary_inventory(self, host: str, pools: list[str]) -> Inventory:
        """`summary_inventory` narrowed to one host, in one read: the pools, the host's
        capacity index and alive key, and its claims counted in each of `pools` (the pools it
        has bricks in). `summarize` of it gives that host's share of each pool, so summing the
        hosts gives the pool's summary; dacd's metrics export it, a read that costs the same
        on a site of 10 hosts as on one of 1,000."""
        k = self.keys
        pools = sorted(set(pools))  # a host's bricks are in a few pools: far below _MAX_TXN_OPS
        r = self.client.txn([], [
            range_op(k.pools, prefix_end(k.pools)),
            range_op(k.capacity(host)),
            range_op(k.alive_key(host), keys_only=True),
        ] + [range_op(k.host_claims(p, host), prefix_end(k.host_claims(p, host)),
                      count_only=True) for p in pools])
        pool_recs, capacity, alive = r.ranges[:3]
        counts = ClaimCounts()
        for pool, n in zip(pools, r.counts[3:], strict=True):
            counts.per_pool[pool] = counts.per_host[(pool, host)] = n
        views = views_of([kv.value for kv in capacity], {host} if alive else set())
        return Inventory.of_counts(parse_pools([kv.value for kv in pool_recs]), views, counts,
                                   r.revision)

    def claims(self) -> dict[tuple[str, str], str]:
        """Every claim: (host, brick) -> buffer name."""
        kvs, _ = self.client.range(self.keys.claims, prefix_end(self.keys.claims))
        return {self.keys.parse_claim(kv.key)[1:]: _load(_m().BrickClaim, kv).buffer for kv in kvs}

    # -- buffers -------------------------------------------------------------------------------

    def create_buffer(self, buffer: Buffer) -> int:
        """Claim every brick of the allocation and create the buffer, all or nothing.

        Raises UserError when the buffer exists, AllocationConflict when a brick was claimed
        meanwhile. Returns the buffer's mod_revision.
        """
        k = self.keys
        name = buffer.name
        pool = buffer.request.pool
        claim_keys = [k.claim(pool, b.host, b.brick) for b in buffer.allocation.bricks]
        if len(set(claim_keys)) != len(claim_keys):
            raise InternalError(f"buffer '{name}': allocation lists a brick twice")
        claim = _dump(_m().BrickClaim(buffer=name))
        # a per-buffer Lustre MGS also claims its host's one MGS slot
        claim_keys += [k.mgs(buffer.allocation.mgs_host)] if buffer.allocation.mgs_host else []
        r = self.client.txn(
            [absent(k.buffer(name))] + [absent(c) for c in claim_keys],
            [put_op(k.buffer(name), _dump(buffer))] + [put_op(c, claim) for c in claim_keys],
            [range_op(k.buffer(name), keys_only=True)],
        )
        if r.succeeded:
            return r.revision
        if r.ranges[0]:
            raise UserError(f"buffer '{name}' already exists")
        raise AllocationConflict(f"buffer '{name}': a chosen brick was claimed by another buffer")

    def mgs_hosts(self) -> set[str]:
        """Hosts whose one Lustre MGS slot a buffer holds."""
        kvs, _ = self.client.range(self.keys.mgs_slots, prefix_end(self.keys.mgs_slots),
                                   keys_only=True)
        return {Keys.last(kv.key, self.keys.mgs_slots) for kv in kvs}

    def buffer(self, name: str) -> Versioned | None:
        kv = self.client.get(self.keys.buffer(name))
        return Versioned(_load(_m().Buffer, kv), kv.mod_revision) if kv else None

    def buffer_text(self, name: str) -> Versioned | None:
        """The spec as etcd holds it, unparsed, with its key: for dacd, which checks every
        record itself (daccore.trust) so that a bad one is skipped, not raised."""
        key = self.keys.buffer(name)
        kv = self.client.get(key)
        return Versioned((key, kv.value), kv.mod_revision) if kv else None

    def buffer_owners(self) -> dict[str, int]:
        """Buffer name -> owner uid, read without validating every spec (job_process)."""
        return {name: doc["owner_uid"] for name, doc in self.buffer_docs().items()
                if isinstance(doc.get("owner_uid"), int)}

    def buffer_names(self) -> tuple[list[str], int]:
        """Every buffer's name, and the revision of the read (to watch from)."""
        kvs, revision = self.client.range(self.keys.buffers, prefix_end(self.keys.buffers),
                                          keys_only=True)
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
        return Versioned(json.loads(kv.value), kv.mod_revision) if kv else None

    def buffer_docs(self) -> dict[str, dict]:
        """Every spec that is a JSON object: one that is not is no buffer any Slurm call can
        act on, and must not stop the calls for the others (dacd logs it, docs/security.md)."""
        kvs, _ = self.client.range(self.keys.buffers, prefix_end(self.keys.buffers))
        docs = {}
        for kv in kvs:
            try:
                doc = json.loads(kv.value)
            except ValueError:  # not JSON, or not UTF-8
                continue
            if isinstance(doc, dict):
                docs[Keys.last(kv.key, self.keys.buffers)] = doc
        return docs

    def buffers(self) -> dict[str, Buffer]:
        return {b.name: b for b in self._list(_m().Buffer, self.keys.buffers)}

    def update_buffer(self, buffer: Buffer, mod_revision: int) -> int:
        """Compare-and-swap the spec; Conflict when someone changed it since `mod_revision`."""
        return self.update_buffer_doc(buffer.model_dump(mode="json"), mod_revision)

    def update_buffer_doc(self, doc: dict, mod_revision: int) -> int:
        key = self.keys.buffer(doc["name"])
        r = self.client.txn([mod_is(key, mod_revision)],
                            [put_op(key, json.dumps(doc, separators=(",", ":")))])
        if not r.succeeded:
            raise Conflict(f"buffer '{doc['name']}' changed since revision {mod_revision}")
        return r.revision

    def delete_buffer(self, name: str, mod_revision: int) -> None:
        """Release the buffer's claims and drop its spec and statuses, in one transaction."""
        current = self.buffer(name)
        if current is None:
            return
        buf: Buffer = current.record
        k = self.keys
        r = self.client.txn(
            [mod_is(k.buffer(name), mod_revision)],
            [delete_op(k.claim(buf.request.pool, b.host, b.brick)) for b in buf.allocation.bricks]
            + [delete_op(k.mgs(h)) for h in [buf.allocation.mgs_host] if h]
            + [delete_op(k.buffer_statuses(name), prefix_end(k.buffer_statuses(name))),
               delete_op(k.buffer(name))],
        )
        if not r.succeeded:
            raise Conflict(f"buffer '{name}' changed since revision {mod_revision}")

    # -- status --------------------------------------------------------------------------------

    def put_status(self, status: Status) -> int:
        """Single writer per key (the host's own dacd), so a plain put."""
        return self.client.put(self.keys.status(status.buffer, status.host), _dump(status))

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

    def watch_buffer_names(self, start_revision: int = 0) -> tuple[Watch, Iterator[Change]]:
        """As watch_buffers, without reading the records (`record` is None): a daemon that
        checks each record when it acts on it, so one bad record never stops the watch."""
        prefix = self.keys.buffers
        w = self.client.watch(prefix, prefix_end(prefix), start_revision)
        return w, (Change(Keys.last(ev.kv.key, prefix), None, ev.kv.mod_revision) for ev in w)

    def watch_statuses(self, start_revision: int = 0) -> tuple[Watch, Iterator[Change]]:
        return self._watch(_m().Status, self.keys.statuses, start_revision)

    def _watch(self, model: type[R], prefix: str,
               start_revision: int) -> tuple[Watch, Iterator[Change]]:
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

    def _update(self, model: type[R], key: str, change: Callable[[R | None], R],
                also: Callable[[R], Op] | None = None,
                guards: Callable[[R | None], list[Compare]] | None = None,
                attempts: int = 20) -> R:
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
        raise InternalError(f"record at {kv.key} is not a valid {model.__name__}: "
                            f"{e.errors()[0]['msg']}") from e

