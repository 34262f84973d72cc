"""Brick claims: a buffer's allocation claims every brick (and a Lustre MGS slot) in the
transaction that creates its spec, or changes nothing; a buffer of more claims than one
transaction holds is claimed in chunks under an intent that the next allocation rolls back if
its call died. Claims are released only by the buffer holding them."""

from __future__ import annotations

import time
from collections import namedtuple

from daccore.errors import Conflict, DacError, InternalError, UserError
from daccore.etcd.types import Compare, Op, absent, delete_op, mod_is, put_op, range_op
from daccore.records.keys import Keys, prefix_end
from daccore.store.base import (
    _MAX_TXN_OPS,
    Change,
    _claim_of,
    _claimant,
    _doc,
    _dump,
    _load,
)
from daccore.store.work import WorkKeys

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from typing import Iterable, Iterator

    from daccore.etcd.stream import Watch
    from daccore.records.models import BrickRef, Buffer

__all__ = ["BrickClaims", "AllocationConflict", "CLAIMS_PER_TXN", "INTENT_TTL"]

#: The most claim keys (bricks, plus a Lustre MGS slot) a buffer may have to be claimed in one
#: transaction, with its spec and intent compares; a bigger one is claimed in chunks of as many
#: under an intent (`Store.create_buffer`, docs/architecture.md).
CLAIMS_PER_TXN = _MAX_TXN_OPS - 4
#: Seconds an allocating call's intent lives without a refresh: a call that dies mid-way
#: leaves its intent to be rolled back by the next allocation (or dacd start) after this.
INTENT_TTL = 10


class AllocationConflict(Conflict):
    """Another buffer claimed one of the chosen bricks first: re-read and place again."""


_Ref = namedtuple("_Ref", "host brick")


class BrickClaims(WorkKeys):
    """Owns `claims/`, `mgs/`, `intents/` and `intent-leases/`: `create_buffer` (the spec
    with its claims and work keys, all or nothing), the release of a buffer's claims,
    `recover_intents`, and the reads of claims (every claim, a host's, the MGS slots)."""

    def create_buffer(self, buffer: Buffer) -> int:
        """Claim every brick of the allocation and create the buffer, all or nothing.

        Raises UserError when the buffer exists, AllocationConflict when a brick was claimed
        meanwhile. Returns the buffer's mod_revision.

        Up to CLAIMS_PER_TXN claim keys, one transaction does it all. A bigger buffer (etcd
        refuses more than --max-txn-ops, default 128, operations on either side of one) is
        claimed in chunks under an intent: its spec at `intents/<name>` and a key bound to this
        call's lease; each chunk, and the commit that turns the intent into the spec, compares
        that lease key's create_revision, so once the lease is gone the call can neither claim
        nor commit, and whoever finds the intent without its lease key rolls it back
        (`recover_intents`). No brick is ever claimed twice: a claim key is still created only
        where absent.
        """
        from daccore.records.models import BrickClaim

        k = self.keys
        name = buffer.name
        claim_keys = self._claim_keys(
            buffer.request.pool, buffer.allocation.bricks, buffer.allocation.mgs_host
        )
        claim = _dump(BrickClaim(buffer=name, primary=buffer.allocation.primary_host))
        spec = _dump(buffer)
        work = self._work_puts(
            name,
            buffer.generation,
            self.work_hosts(
                buffer.request.pool, buffer.allocation.primary_host, buffer.allocation.hosts
            ),
        )
        if len(claim_keys) > CLAIMS_PER_TXN:
            return self._create_in_chunks(name, spec, claim, claim_keys, work)
        # the work keys that do not fit (a local buffer over ~50 hosts) right after: each of
        # those hosts holds a claim made in this transaction, whose event wakes its dacd too
        room = _MAX_TXN_OPS - 1 - len(claim_keys)
        r = self.client.txn(
            [absent(k.buffer(name)), absent(k.intent(name))] + [absent(c) for c in claim_keys],
            [put_op(k.buffer(name), spec)] + [put_op(c, claim) for c in claim_keys] + work[:room],
            [range_op(k.buffer(name), keys_only=True)],
        )
        if r.succeeded:
            self._wake_rest(name, r.revision, work[room:])
            return r.revision
        if r.ranges[0]:
            raise UserError(f"buffer '{name}' already exists")
        raise AllocationConflict(
            f"buffer '{name}': a chosen brick was claimed by another buffer"
            " (or another call is allocating it)"
        )

    def _claim_keys(
        self, pool: str, bricks: Iterable[BrickRef | _Ref], mgs_host: str | None
    ) -> list[str]:
        """The claim keys of an allocation: one per brick, and a per-buffer Lustre MGS's slot
        on its host."""
        k = self.keys
        keys = [k.claim(pool, b.host, b.brick) for b in bricks]
        if len(set(keys)) != len(keys):
            raise InternalError("an allocation lists a brick twice")
        return keys + ([k.mgs(mgs_host)] if mgs_host else [])

    def _create_in_chunks(
        self, name: str, spec: str, claim: str, claim_keys: list[str], work: list[Op]
    ) -> int:
        k = self.keys
        intent, lease_key = k.intent(name), k.intent_lease(name)
        lease = self.client.lease_grant(INTENT_TTL)
        refreshed = time.monotonic()
        try:
            r = self.client.txn(
                [absent(k.buffer(name)), absent(intent), absent(lease_key)],
                [put_op(intent, spec), put_op(lease_key, "", lease)],
                [range_op(k.buffer(name), keys_only=True)],
            )
            if not r.succeeded:
                if r.ranges[0]:
                    raise UserError(f"buffer '{name}' already exists")
                raise AllocationConflict(f"buffer '{name}' is being allocated by another call")
            alive = Compare(lease_key, "CREATE", r.revision)  # this call's intent, no other
            try:
                for start in range(0, len(claim_keys), CLAIMS_PER_TXN):
                    if time.monotonic() - refreshed > INTENT_TTL / 3:
                        if self.client.lease_keepalive(lease) == 0:
                            raise AllocationConflict(
                                f"buffer '{name}': the allocation took "
                                f"longer than {INTENT_TTL}s; starting over"
                            )
                        refreshed = time.monotonic()
                    self._claim_chunk(
                        name, alive, claim, claim_keys[start : start + CLAIMS_PER_TXN]
                    )
                # the spec and its work keys in one transaction; beyond it (a local buffer
                # over ~100 hosts) the rest right after: those hosts' claims came before the
                # spec, so a call that dies in between leaves them to dacd's resync
                room = _MAX_TXN_OPS - 3
                r = self.client.txn(
                    [alive, absent(k.buffer(name))],
                    [put_op(k.buffer(name), spec), delete_op(intent), delete_op(lease_key)]
                    + work[:room],
                )
                if not r.succeeded:
                    raise AllocationConflict(
                        f"buffer '{name}': its intent was rolled back "
                        "before it committed; starting over"
                    )
                self._wake_rest(name, r.revision, work[room:])
                return r.revision
            except BaseException:
                try:  # our own claims, then the intent, while it is still ours
                    self._release(name, claim_keys, alive)
                    self.client.txn([alive], [delete_op(intent), delete_op(lease_key)])
                except DacError:
                    pass  # the lease is gone, or etcd is: recover_intents finishes it
                raise
        finally:
            self.client.lease_revoke(lease)  # gone already if it committed or rolled back

    def _claim_chunk(self, name: str, alive: Compare, claim: str, keys: list[str]) -> None:
        """Create `keys` as `name`'s claims while its intent is alive; AllocationConflict if
        one is held by another buffer or the intent is gone."""
        todo = keys
        for _ in range(3):
            r = self.client.txn(
                [alive] + [absent(c) for c in todo],
                [put_op(c, claim) for c in todo],
                [range_op(alive.key, keys_only=True)] + [range_op(c) for c in todo],
            )
            if r.succeeded:
                return
            found = r.ranges[0]
            if not found or found[0].create_revision != alive.revision:
                raise AllocationConflict(
                    f"buffer '{name}': its intent was rolled back before "
                    "it committed; starting over"
                )
            held = {kvs[0].key: _claimant(kvs[0]) for kvs in r.ranges[1:] if kvs}
            if any(b != name for b in held.values()):
                raise AllocationConflict(
                    f"buffer '{name}': a chosen brick was claimed by another buffer"
                )
            # claims of ours already: a retried transaction whose first reply was lost
            # (nothing else writes this name's claims while its intent lives)
            todo = [c for c in todo if c not in held]
            if not todo:
                return
        raise AllocationConflict(f"buffer '{name}': claims kept changing")

    def _release(self, name: str, claim_keys: list[str], *guards: Compare) -> None:
        """Delete those of `claim_keys` that `name` holds, in chunks, each key compared at the
        revision it was read (a key freed and claimed again by another buffer meanwhile is
        left alone). `guards`: more compares every deleting transaction makes; Conflict when
        one of them fails."""
        for start in range(0, len(claim_keys), CLAIMS_PER_TXN):
            chunk = claim_keys[start : start + CLAIMS_PER_TXN]
            for _ in range(20):
                r = self.client.txn([], [range_op(c) for c in chunk])
                mine = [kvs[0] for kvs in r.ranges if kvs and _claimant(kvs[0]) == name]
                if not mine:
                    break
                d = self.client.txn(
                    list(guards) + [mod_is(kv.key, kv.mod_revision) for kv in mine],
                    [delete_op(kv.key) for kv in mine],
                    [range_op(g.key, keys_only=True) for g in guards],
                )
                if d.succeeded:
                    break
                for g, kvs in zip(guards, d.ranges, strict=True):
                    kv = kvs[0] if kvs else None
                    now = (
                        (kv.create_revision if g.target == "CREATE" else kv.mod_revision)
                        if kv
                        else 0
                    )
                    if now != g.revision:
                        raise Conflict(f"{g.key} changed while releasing '{name}''s claims")
            else:
                raise Conflict(f"claims of '{name}' kept changing while releasing them")

    def recover_intents(
        self, names: list[str] | None = None, unreadable: list[str] | None = None
    ) -> list[str]:
        """Roll back every intent whose call is gone (its lease key expired): release the
        claims it made, then drop it. `names`: those found dead already (Inventory's
        `dead_intents`). Safe to run anywhere, any number of times at once; returns the
        buffers rolled back. An intent that is no spec dac wrote names no claim to release:
        it is left for an admin, its key added to `unreadable`."""
        k = self.keys
        if names is None:
            r = self.client.txn(
                [],
                [
                    range_op(k.intents, prefix_end(k.intents), keys_only=True),
                    range_op(k.intent_leases, prefix_end(k.intent_leases), keys_only=True),
                ],
            )
            live = {Keys.last(kv.key, k.intent_leases) for kv in r.ranges[1]}
            names = [n for kv in r.ranges[0] if (n := Keys.last(kv.key, k.intents)) not in live]
        done = []
        for name in names:
            kv = self.client.get(k.intent(name))
            if kv is None or self.client.get(k.intent_lease(name)) is not None:
                continue  # rolled back or committed by someone else, or alive after all
            try:
                doc = _doc(kv.value)
                alloc = doc["allocation"]  # type: ignore[index]
                keys = self._claim_keys(
                    doc["request"]["pool"],  # type: ignore[index]
                    [_Ref(b["host"], b["brick"]) for b in alloc["bricks"]],
                    alloc.get("mgs_host"),
                )
            except (TypeError, KeyError, AttributeError):  # None, or not a spec's fields
                if unreadable is not None:
                    unreadable.append(kv.key)
                continue
            # The lease key is absent: the call that wrote the intent can claim no more, and
            # no other call can start one for this name while the intent exists. Every delete
            # compares the intent unchanged: once another recoverer has dropped it, a new
            # allocation of the same name may hold claims of that name.
            try:
                self._release(name, keys, mod_is(kv.key, kv.mod_revision))
            except Conflict:
                continue
            self.client.txn(
                [mod_is(kv.key, kv.mod_revision), absent(k.intent_lease(name))], [delete_op(kv.key)]
            )
            done.append(name)
        return done

    def claims(self) -> dict[tuple[str, str], str]:
        """Every claim: (host, brick) -> buffer name."""
        from daccore.records.models import BrickClaim

        kvs, _ = self.client.range(self.keys.claims, prefix_end(self.keys.claims))
        return {self.keys.parse_claim(kv.key)[1:]: _load(BrickClaim, kv).buffer for kv in kvs}

    def host_claims(
        self, host: str, pools: list[str]
    ) -> tuple[dict[str, tuple[str, str | None] | None], int]:
        """The claims on `host`'s bricks in `pools` (claim key -> (buffer, its primary host
        or None when the claim does not say), or None for a record that is no claim), and the
        revision of the read (to watch from): which buffers the host's dacd works on."""
        k = self.keys
        prefixes = [k.host_claims(p, host) for p in sorted(set(pools))]
        r = self.client.txn([], [range_op(p, prefix_end(p)) for p in prefixes])
        return {kv.key: _claim_of(kv) for kvs in r.ranges for kv in kvs}, r.revision

    def watch_host_claims(
        self, host: str, pool: str, start_revision: int = 0
    ) -> tuple[Watch, Iterator[Change]]:
        """Every claim made or released on `host`'s bricks in `pool`: `name` is the claim
        key, `record` (buffer, primary host) as host_claims has it, None when released or
        when what was put is no claim (`bad` then)."""
        prefix = self.keys.host_claims(pool, host)
        w = self.client.watch(prefix, prefix_end(prefix), start_revision)

        def changes() -> Iterator[Change]:
            for ev in w:
                claim = _claim_of(ev.kv) if ev.type == "put" else None
                yield Change(
                    ev.kv.key, claim, ev.kv.mod_revision, ev.type == "put" and claim is None
                )

        return w, changes()

    def mgs_hosts(self) -> set[str]:
        """Hosts whose one Lustre MGS slot a buffer holds."""
        kvs, _ = self.client.range(
            self.keys.mgs_slots, prefix_end(self.keys.mgs_slots), keys_only=True
        )
        return {Keys.last(kv.key, self.keys.mgs_slots) for kv in kvs}
