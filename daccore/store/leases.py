"""What lives on an etcd lease: a dacd's `alive/<host>` key and the fence it puts on that
store's writes, who is alive, and an owner's lock for making persistent buffers."""

from __future__ import annotations

import time

from daccore.errors import Conflict, DacError, Fenced
from daccore.etcd.types import Compare, Op, absent, mod_is, put_op, range_op
from daccore.records.keys import Keys, prefix_end
from daccore.store.base import Connection

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from typing import Callable, Iterator

    from daccore.etcd.stream import LeaseKeeper
    from daccore.etcd.types import EtcdApi

__all__ = ["Leases", "OWNER_LOCK_TTL"]

#: seconds an owner's lock outlives a call that died holding it (Store.owner_lock): longer
#: than a persistent buffer's allocation takes
OWNER_LOCK_TTL = 60


class Leases(Connection):
    """Owns `alive/` (keep_alive, alive, alive_among, lease_ages), the fence of a dacd's
    writes on its lease (`_fenced_txn`, used by statuses and reaps) and `owner-locks/`."""

    def __init__(self, client: EtcdApi, prefix: str = "/dac/v1/"):
        super().__init__(client, prefix)
        #: host -> (its alive key, the revision of its last bind): keep_alive fences this
        #: store's writes of that host's statuses, and its reaps, on the dacd's lease (dacd);
        #: empty for every other caller
        self._fences: dict[str, tuple[str, int]] = {}

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

    def owner_lock(self, uid: int, timeout: float = 120.0) -> AbstractContextManager[None]:
        """A context that holds `owner-locks/<uid>` for one call at a time: the key is created
        only if absent, bound to a lease of OWNER_LOCK_TTL seconds (a call that dies frees it
        then), and revoked on exit. Waits up to `timeout` for another holder."""
        import contextlib
        import random

        @contextlib.contextmanager
        def held() -> Iterator[None]:
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
