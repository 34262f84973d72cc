"""dac's state in etcd: records in, records out. The only module that reads or writes keys.

Writers are unique per key (see `daccore.keys`); every read-modify-write compares the key's
mod_revision, and the allocation of a buffer is one transaction that creates the buffer and all
of its claim keys, or changes nothing.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Callable, Iterator, TypeVar

from pydantic import BaseModel, ValidationError

from daccore.config import EtcdSettings
from daccore.errors import AdminError, Conflict, InternalError, NotFound, UserError
from daccore.etcd import (KV, EtcdClient, LeaseKeeper, Op, Watch, absent, delete_op, mod_is,
                          put_op, range_op)
from daccore.gcpause import gc_paused
from daccore.inventory import Inventory
from daccore.keys import Keys, prefix_end
from daccore.models import BrickClaim, Buffer, Host, HostCapacity, Pool, Status

log = logging.getLogger(__name__)

__all__ = ["Store", "Versioned", "Change", "AllocationConflict"]

R = TypeVar("R", bound=BaseModel)


class AllocationConflict(Conflict):
    """Another buffer claimed one of the chosen bricks first: re-read and place again."""


@dataclass(frozen=True, slots=True)
class Versioned:
    """A record with the mod_revision to compare against when writing it back."""

    record: BaseModel
    mod_revision: int


@dataclass(frozen=True, slots=True)
class Change:
    """One event of a watch: `record` is None when the key was deleted."""

    name: str
    record: BaseModel | None
    revision: int


class Store:
    """Typed access to dac's keys. Constructing one does no I/O."""

    def __init__(self, client: EtcdClient, prefix: str = "/dac/v1/"):
        self.client = client
        self.keys = Keys(prefix)

    @classmethod
    def from_settings(cls, etcd: EtcdSettings, transport: str | None = None) -> Store:
        """`transport` overrides the configured one (the Slurm hot path forces "http")."""
        client = EtcdClient(etcd.urls, cacert=etcd.cacert, cert=etcd.cert, key=etcd.key,
                            timeout=etcd.timeout, transport=transport or etcd.transport)
        return cls(client, etcd.prefix)

    # -- pools ---------------------------------------------------------------------------------

    def ensure_pool(self, pool: Pool) -> Pool:
        """Create the pool record if missing; refuse a different definition of an existing one."""
        key = self.keys.pool(pool.name)
        r = self.client.txn([absent(key)], [put_op(key, _dump(pool))], [range_op(key)])
        if r.succeeded:
            return pool
        existing = _load(Pool, r.ranges[0][0])
        if existing != pool:
            raise AdminError(
                f"pool '{pool.name}' is registered as {existing.model_dump(mode='json')} but this "
                f"config says {pool.model_dump(mode='json')}: make every dacd's config agree, or "
                f"delete the pool once no buffer uses it")
        return existing

    def pools(self) -> dict[str, Pool]:
        return {p.name: p for p in self._list(Pool, self.keys.pools)}

    # -- hosts and liveness --------------------------------------------------------------------

    def register_host(self, host: Host) -> Host:
        """Write the host's record, keeping the drained flag an admin may have set."""
        def change(old: Host | None) -> Host:
            return host.model_copy(update={"drained": old.drained}) if old else host
        return self._update(Host, self.keys.host(host.name), change, self._capacity_op)

    def set_drained(self, name: str, drained: bool) -> Host:
        def change(old: Host | None) -> Host:
            if old is None:
                raise NotFound(f"unknown host '{name}'")
            return old.model_copy(update={"drained": drained})
        return self._update(Host, self.keys.host(name), change, self._capacity_op)

    def _capacity_op(self, host: Host) -> Op:
        """The host's capacity index, written in the same txn as its record, never apart."""
        return put_op(self.keys.capacity(host.name), _dump(HostCapacity.of(host)))

    def hosts(self) -> dict[str, Host]:
        return {h.name: h for h in self._list(Host, self.keys.hosts)}

    def keep_alive(self, host: str, ttl: int) -> LeaseKeeper:
        """Start keeping `alive/<host>` on a lease; returns once the key exists."""
        key = self.keys.alive_key(host)
        return LeaseKeeper(self.client, ttl, lambda lease: self.client.put(key, "", lease),
                           name=f"lease-{host}").start()

    def alive(self) -> set[str]:
        kvs, _ = self.client.range(self.keys.alive, prefix_end(self.keys.alive), keys_only=True)
        return {Keys.last(kv.key, self.keys.alive) for kv in kvs}

    # -- inventory -----------------------------------------------------------------------------

    def inventory(self, claim_owners: bool = False) -> Inventory:
        """Pools, full host records, liveness and claims, at one revision: for placement."""
        return self._inventory(self.keys.hosts, claim_owners)

    def summary_inventory(self) -> Inventory:
        """Pools, capacity indexes, liveness and claims, at one revision: enough to
        `summarize`, and several times cheaper than `inventory` on a big site."""
        return self._inventory(self.keys.capacities, False)

    def _inventory(self, host_prefix: str, claim_owners: bool) -> Inventory:
        with gc_paused():
            return self._read_inventory(host_prefix, claim_owners)

    def _read_inventory(self, host_prefix: str, claim_owners: bool) -> Inventory:
        k = self.keys
        r = self.client.txn([], [  # one read-only txn: every range at the same revision
            range_op(k.pools, prefix_end(k.pools)),
            range_op(host_prefix, prefix_end(host_prefix)),
            range_op(k.alive, prefix_end(k.alive), keys_only=True),
            range_op(k.claims, prefix_end(k.claims), keys_only=not claim_owners),
        ])
        pools, hosts, alive, claims = r.ranges
        if claim_owners:
            claimed = {k.parse_claim(kv.key): json.loads(kv.value)["buffer"] for kv in claims}
        else:
            claimed = {k.parse_claim(kv.key): "" for kv in claims}
        records = [kv.value for kv in hosts]
        full = host_prefix == k.hosts
        return Inventory.from_json(
            [kv.value for kv in pools], {Keys.last(kv.key, k.alive) for kv in alive}, claimed,
            hosts=records if full else None, capacities=None if full else records,
            revision=r.revision)

    def claims(self) -> dict[tuple[str, str], str]:
        """Every claim: (host, brick) -> buffer name."""
        kvs, _ = self.client.range(self.keys.claims, prefix_end(self.keys.claims))
        return {self.keys.parse_claim(kv.key): _load(BrickClaim, kv).buffer for kv in kvs}

    # -- buffers -------------------------------------------------------------------------------

    def create_buffer(self, buffer: Buffer) -> int:
        """Claim every brick of the allocation and create the buffer, all or nothing.

        Raises UserError when the buffer exists, AllocationConflict when a brick was claimed
        meanwhile. Returns the buffer's mod_revision.
        """
        k = self.keys
        name = buffer.name
        claim_keys = [k.claim(b.host, b.brick) for b in buffer.allocation.bricks]
        if len(set(claim_keys)) != len(claim_keys):
            raise InternalError(f"buffer '{name}': allocation lists a brick twice")
        claim = _dump(BrickClaim(buffer=name))
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

    def buffer(self, name: str) -> Versioned | None:
        kv = self.client.get(self.keys.buffer(name))
        return Versioned(_load(Buffer, kv), kv.mod_revision) if kv else None

    def buffers(self) -> dict[str, Buffer]:
        return {b.name: b for b in self._list(Buffer, self.keys.buffers)}

    def update_buffer(self, buffer: Buffer, mod_revision: int) -> int:
        """Compare-and-swap the spec; Conflict when someone changed it since `mod_revision`."""
        key = self.keys.buffer(buffer.name)
        r = self.client.txn([mod_is(key, mod_revision)], [put_op(key, _dump(buffer))])
        if not r.succeeded:
            raise Conflict(f"buffer '{buffer.name}' changed since revision {mod_revision}")
        return r.revision

    def delete_buffer(self, name: str, mod_revision: int) -> None:
        """Release the buffer's claims and drop its spec and statuses, in one transaction."""
        current = self.buffer(name)
        if current is None:
            return
        buf: Buffer = current.record  # type: ignore[assignment]
        k = self.keys
        r = self.client.txn(
            [mod_is(k.buffer(name), mod_revision)],
            [delete_op(k.claim(b.host, b.brick)) for b in buf.allocation.bricks]
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
        return {s.host: s for s in self._list(Status, self.keys.buffer_statuses(buffer))}

    # -- watch ---------------------------------------------------------------------------------

    def watch_buffers(self, start_revision: int = 0) -> tuple[Watch, Iterator[Change]]:
        """Every change to a buffer spec from `start_revision` on; the Watch closes it."""
        return self._watch(Buffer, self.keys.buffers, start_revision)

    def watch_statuses(self, start_revision: int = 0) -> tuple[Watch, Iterator[Change]]:
        return self._watch(Status, self.keys.statuses, start_revision)

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
                also: Callable[[R], Op] | None = None, attempts: int = 20) -> R:
        """Read-modify-write with compare-and-swap, retried when another writer got there
        first; `also(new)` is one more op committed in the same transaction."""
        for _ in range(attempts):
            kv = self.client.get(key)
            old = _load(model, kv) if kv else None
            new = change(old)
            guard = mod_is(key, kv.mod_revision) if kv else absent(key)
            ops = [put_op(key, _dump(new))] + ([also(new)] if also else [])
            if self.client.txn([guard], ops).succeeded:
                return new
        raise Conflict(f"{key} kept changing under {attempts} attempts to update it")


def _dump(record: BaseModel) -> str:
    return record.model_dump_json()


def _load(model: type[R], kv: KV) -> R:
    try:
        return model.model_validate_json(kv.value)
    except ValidationError as e:
        raise InternalError(f"record at {kv.key} is not a valid {model.__name__}: "
                            f"{e.errors()[0]['msg']}") from e

