"""Work keys: `work/<host>/<name>`, put with every write of a spec for each host that acts
on the buffer and dropped with it, so that a dacd watches its own `work/<host>/` instead of
every spec (at 1,000 servers the `buffers/` watch sent each change to every dacd:
docs/performance.md)."""

from __future__ import annotations

from daccore.etcd.types import KV, Op, delete_op, mod_is, put_op, range_op
from daccore.records.keys import Keys, prefix_end
from daccore.store.base import _MAX_TXN_OPS, Change, Connection, _claim_of, _doc

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from typing import Iterable, Iterator

    from daccore.etcd.stream import Watch
    from daccore.etcd.types import EtcdApi

__all__ = ["WorkKeys"]


class WorkKeys(Connection):
    """Owns `work/`: which hosts act on a buffer (`work_hosts`, from the pools' backends),
    the puts that go with a spec's write, a wake-up by hand, a host's watch of its own keys,
    and the drop of strays."""

    def __init__(self, client: EtcdApi, prefix: str = "/dac/v1/"):
        super().__init__(client, prefix)
        #: pool -> whether its backend runs each step once, on the primary, for all hosts:
        #: read from the pool records once (dac writes a pool record once and never changes
        #: it: ensure_pool refuses a different definition)
        self._once: dict[str, bool] = {}

    def work_hosts(self, pool: str, primary: str, hosts: Iterable[str]) -> list[str]:
        """The hosts whose dacd acts on a buffer of `pool`, and so get its work keys: the
        primary alone where the pool's backend runs each step once for all hosts (lustre,
        daos), else every host of the buffer. A pool without a record gets every host: a
        wake-up too many costs a dacd nothing, one too few leaves a buffer unseen."""
        if pool not in self._once:
            kvs, _ = self.client.range(self.keys.pools, prefix_end(self.keys.pools))
            self._note_pools(kvs)
        return [primary] if self._once.get(pool) else sorted(set(hosts))

    def _note_pools(self, kvs: list[KV]) -> None:
        from daccore.backends import runs_once_for_all_hosts

        for kv in kvs:
            doc = _doc(kv.value)
            if doc is None:
                continue  # not a pool record: its buffers wake every host
            backend = doc.get("backend", "local")
            if isinstance(backend, str):
                self._once[Keys.last(kv.key, self.keys.pools)] = runs_once_for_all_hosts(backend)

    def wake(self, host: str, name: str) -> None:
        """Put `host`'s work key of buffer `name`, so its dacd looks at the buffer again: a
        host that deleted its part last wakes the primary, whose reap it waits for (a status
        write wakes no one). A key left after the reap is a stray, dropped at dacd's resync."""
        self.client.put(self.keys.work(host, name), "wake")

    def _work_puts(self, name: str, generation: int, hosts: list[str]) -> list[Op]:
        """The puts of a spec's work keys; the value is the spec's generation, for whoever
        reads the keys by hand: what wakes a dacd is the put itself."""
        return [put_op(self.keys.work(h, name), str(generation)) for h in hosts]

    def _wake_rest(self, name: str, revision: int, ops: list[Op]) -> None:
        """The work keys that did not fit in the spec's own transaction, right after it,
        each chunk while the spec is still the one written at `revision`: a newer write puts
        every work key itself, and a buffer deleted meanwhile must not get keys again."""
        key = self.keys.buffer(name)
        for start in range(0, len(ops), _MAX_TXN_OPS):
            if not self.client.txn(
                [mod_is(key, revision)], ops[start : start + _MAX_TXN_OPS]
            ).succeeded:
                return

    def watch_host_work(self, host: str, start_revision: int = 0) -> tuple[Watch, Iterator[Change]]:
        """The buffers `host`'s dacd must look at again: `name` the buffer, `record` the
        key's value (None when it was deleted). Names only: dacd reads and checks the spec."""
        prefix = self.keys.host_work(host)
        w = self.client.watch(prefix, prefix_end(prefix), start_revision)
        return w, (
            Change(
                Keys.last(ev.kv.key, prefix),
                ev.kv.value if ev.type == "put" else None,
                ev.kv.mod_revision,
            )
            for ev in w
        )

    def drop_stray_work(self, host: str, pools: list[str]) -> list[str]:
        """Delete `host`'s work keys that name a buffer holding none of its bricks in `pools`
        (its claims read in the same transaction): written by hand, or by a writer that got
        the acting hosts wrong (a key whose buffer's claims are being released goes too: the
        spec's delete would drop it). Each goes only if unchanged since read, so a buffer
        created anew under the name keeps its key. Returns their buffers."""
        k = self.keys
        mine = k.host_work(host)
        r = self.client.txn(
            [],
            [range_op(mine, prefix_end(mine), keys_only=True)]
            + [
                range_op(k.host_claims(p, host), prefix_end(k.host_claims(p, host)))
                for p in sorted(set(pools))
            ],
        )
        held = {c[0] for kvs in r.ranges[1:] for kv in kvs if (c := _claim_of(kv)) is not None}
        gone = []
        for kv in r.ranges[0]:
            name = Keys.last(kv.key, mine)
            if (
                name not in held
                and self.client.txn(
                    [mod_is(kv.key, kv.mod_revision)], [delete_op(kv.key)]
                ).succeeded
            ):
                gone.append(name)
        return gone
