"""The site's registered storage: pool records, host records and each host's capacity index."""

from __future__ import annotations

from daccore.errors import AdminError, BadRecord, Conflict, NotFound
from daccore.etcd.types import Compare, Op, absent, put_op, range_op
from daccore.records.keys import prefix_end
from daccore.store.base import Connection, _dump, _GuardFailed, _load

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from daccore.records.models import Host, Pool

__all__ = ["PoolsAndHosts"]


class PoolsAndHosts(Connection):
    """Owns `pools/`, `hosts/` and `capacity/`: a pool is created once and never changed, a
    host's record and its capacity index are written together, and a brick a buffer holds
    never leaves its host or pool."""

    def ensure_pool(self, pool: Pool) -> Pool:
        """Create the pool record if missing; refuse a different definition of an existing one."""
        from daccore.records.models import Pool

        key = self.keys.pool(pool.name)
        r = self.client.txn([absent(key)], [put_op(key, _dump(pool))], [range_op(key)])
        if r.succeeded:
            return pool
        existing = _load(Pool, r.ranges[0][0])
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
        from daccore.records.models import Pool

        kvs, _ = self.client.range(self.keys.pools, prefix_end(self.keys.pools))
        out = {}
        for kv in kvs:
            try:
                pool = _load(Pool, kv)
            except BadRecord:
                continue
            out[pool.name] = pool
        return out

    def register_host(self, host: Host) -> Host:
        """Write the host's record, keeping the drained flag an admin may have set.

        A brick that a buffer holds may neither leave the host nor move to another pool: its
        claim key names its pool, so a move would let a second buffer claim it. The write
        compares every such claim key absent, and refuses with the buffer's name otherwise.
        """
        from daccore.records.models import BrickClaim, Host

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
            return self._update(Host, k.host(host.name), change, self._capacity_op, still_free)
        except _GuardFailed as e:
            held = {
                kv.key: _load(BrickClaim, kv).buffer
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
        from daccore.records.models import Host

        def change(old: Host | None) -> Host:
            if old is None:
                raise NotFound(f"unknown host '{name}'")
            return old.model_copy(update={"drained": drained})

        return self._update(Host, self.keys.host(name), change, self._capacity_op)

    def _capacity_op(self, host: Host) -> Op:
        """The host's capacity index, written in the same txn as its record, never apart."""
        from daccore.records.models import HostCapacity

        return put_op(self.keys.capacity(host.name), _dump(HostCapacity.of(host)))

    def hosts(self) -> dict[str, Host]:
        from daccore.records.models import Host

        return {h.name: h for h in self._list(Host, self.keys.hosts)}
