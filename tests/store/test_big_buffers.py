"""Buffers of more bricks than one etcd transaction may hold (etcd's --max-txn-ops, 128 by
default): claimed in chunks under an intent, all or nothing, never a brick twice, and a call
cut short between chunks rolled back by the next one (issue 20)."""

import random
import threading
import time
from collections import Counter

import pytest
from records import buffer_maker, host, pool

from daccore.errors import CapacityError
from daccore.etcd.types import EtcdRequestError, put_op
from daccore.records.models import Buffer
from daccore.rules.inventory import summarize
from daccore.services.buffers import allocate_buffer
from daccore.store import CLAIMS_PER_TXN, AllocationConflict, Store
from daccore.store import claims as claims_module

HOSTS, BRICKS = 128, 16  # 2,048 bricks: 2 PiB of 1 TiB bricks, the biggest pool the issue names


@pytest.fixture
def big(store):
    """A pool of 128 live hosts x 16 bricks of 100 B."""
    store.ensure_pool(pool())
    for h in range(HOSTS):
        name = f"h{h:03d}"
        store.register_host(host(name, BRICKS))
        store.client.put(store.keys.alive_key(name), "")
    return store


def intents(store):
    k = store.keys
    return (
        {kv.key for kv in store.client.range(k.intents, k.intents[:-1] + "0")[0]},
        {kv.key for kv in store.client.range(k.intent_leases, k.intent_leases[:-1] + "0")[0]},
    )


def test_etcd_refuses_a_transaction_over_its_default_limit(store):
    """The test etcd runs with etcd's defaults: what the chunking is for."""
    with pytest.raises(EtcdRequestError, match="too many operations in txn request"):
        store.client.txn([], [put_op(f"{store.keys.root}x{i}", "") for i in range(129)])


def test_a_2048_brick_buffer_is_claimed_whole_and_released_whole(big):
    started = time.monotonic()
    buf, rev = allocate_buffer(big, buffer_maker("huge", 2048 * 100), capacity=2048 * 100, pool="p")
    took = time.monotonic() - started
    claims = big.claims()
    assert len(buf.allocation.bricks) == 2048 and len(claims) == 2048
    assert set(claims.values()) == {"huge"}
    assert {(b.host, b.brick) for b in buf.allocation.bricks} == set(claims)
    assert big.buffer("huge").mod_revision == rev
    assert intents(big) == (set(), set())
    assert took < 30
    (s,) = summarize(big.summary_inventory())
    assert (s.total, s.used, s.free) == (2048, 2048, 0)
    with pytest.raises(CapacityError):
        allocate_buffer(big, buffer_maker("one", 100), capacity=100, pool="p")
    big.delete_buffer("huge", rev)
    assert big.claims() == {} and big.buffer("huge") is None


def test_a_big_buffer_that_loses_a_brick_leaves_nothing(big):
    inv = big.inventory()
    bricks = [b for h in sorted(inv.free_bricks("p")) for b in inv.free_bricks("p")[h]]
    from daccore.services.buffers import allocation_of

    taken = bricks[3 * CLAIMS_PER_TXN + 5]  # in the fourth chunk
    big.create_buffer(buffer_maker("small", 100)(allocation_of([taken])))
    with pytest.raises(AllocationConflict):
        big.create_buffer(buffer_maker("huge", 500 * 100)(allocation_of(bricks[:500])))
    assert big.claims() == {(taken.host, taken.name): "small"}
    assert big.buffer("huge") is None and intents(big) == (set(), set())


class Crash(BaseException):
    """The allocating process dies: nothing after it runs (not even the rollback)."""


def test_a_call_cut_short_between_chunks_is_rolled_back_by_the_next(big, monkeypatch):
    monkeypatch.setattr(claims_module, "INTENT_TTL", 2)
    real_chunk = Store._claim_chunk
    chunks: Counter[str] = Counter()

    def dying_chunk(self, *args):
        if chunks["n"] == 2:
            raise Crash()
        chunks["n"] += 1
        return real_chunk(self, *args)

    def nothing_more(self, *args):
        raise Crash()

    monkeypatch.setattr(Store, "_claim_chunk", dying_chunk)
    monkeypatch.setattr(Store, "_release", nothing_more)
    monkeypatch.setattr(type(big.client), "lease_revoke", lambda self, lease: None)
    with pytest.raises(Crash):
        allocate_buffer(big, buffer_maker("huge", 1000 * 100), capacity=1000 * 100, pool="p")
    monkeypatch.undo()
    monkeypatch.setattr(claims_module, "INTENT_TTL", 2)
    held = big.claims()
    assert len(held) == 2 * CLAIMS_PER_TXN and set(held.values()) == {"huge"}
    assert big.buffer("huge") is None
    assert intents(big) == ({big.keys.intent("huge")}, {big.keys.intent_lease("huge")})
    assert big.recover_intents() == []  # its lease still runs: it may be alive, only slow
    assert len(big.claims()) == 2 * CLAIMS_PER_TXN
    deadline = time.monotonic() + 10
    while intents(big)[1] and time.monotonic() < deadline:  # the lease expires
        time.sleep(0.2)
    assert big.inventory().dead_intents == ["huge"]
    buf, _ = allocate_buffer(big, buffer_maker("next", 100), capacity=100, pool="p")
    assert big.claims() == {(buf.allocation.bricks[0].host, buf.allocation.bricks[0].brick): "next"}
    assert intents(big) == (set(), set())
    # the name is free again, and a whole allocation of it goes through
    allocate_buffer(big, buffer_maker("huge", 1000 * 100), capacity=1000 * 100, pool="p")
    assert Counter(big.claims().values()) == {"huge": 1000, "next": 1}


def test_a_call_whose_intent_expired_can_neither_claim_nor_commit(big, monkeypatch):
    real_chunk = Store._claim_chunk
    chunks: Counter[str] = Counter()

    def expiring_chunk(self, name, alive, claim, keys):
        if chunks["n"] == 1:  # the lease is lost (e.g. a long pause) and someone rolls back
            lease = self.client.get(self.keys.intent_lease(name)).lease
            self.client.lease_revoke(lease)
            assert self.recover_intents() == [name]
        chunks["n"] += 1
        return real_chunk(self, name, alive, claim, keys)

    monkeypatch.setattr(Store, "_claim_chunk", expiring_chunk)
    from daccore.services.buffers import allocation_of

    inv = big.inventory()
    bricks = [b for h in sorted(inv.free_bricks("p")) for b in inv.free_bricks("p")[h]]
    with pytest.raises(AllocationConflict, match="rolled back"):
        big.create_buffer(buffer_maker("huge", 300 * 100)(allocation_of(bricks[:300])))
    assert big.claims() == {} and big.buffer("huge") is None
    assert intents(big) == (set(), set())


def test_a_storm_of_mixed_sizes_never_claims_a_brick_twice(big):
    """200 allocations from 20 threads, 1 to 400 bricks each, for about twice what exists."""
    results = {}
    lock = threading.Lock()

    def request(i):
        rng = random.Random(i)
        n = rng.choice([1, 1, 2, 3, 8, 24, 97, 150, 400]) if i % 10 else 1
        outcome: Buffer | str
        try:
            buf, _ = allocate_buffer(
                big, buffer_maker(f"j{i}", n * 100), capacity=n * 100, pool="p", rng=rng
            )
            outcome = buf
        except CapacityError as e:
            outcome = str(e)
        with lock:
            results[i] = outcome

    threads = []
    for w in range(20):
        t = threading.Thread(target=lambda w=w: [request(i) for i in range(w, 200, 20)])
        threads.append(t)
        t.start()
    for t in threads:
        t.join()
    won = [b for b in results.values() if not isinstance(b, str)]
    assert len(results) == 200 and len(won) > 10
    claims = big.claims()
    held = Counter((b.host, b.brick) for buf in won for b in buf.allocation.bricks)
    assert max(held.values()) == 1  # no brick in two allocations
    assert claims == {(b.host, b.brick): buf.name for buf in won for b in buf.allocation.bricks}
    assert set(big.buffers()) == {b.name for b in won}
    assert intents(big) == (set(), set())
    assert any(len(b.allocation.bricks) > CLAIMS_PER_TXN for b in won)


def test_placement_reads_agree_with_the_full_inventory(big):
    """placement_view's free counts and free_bricks_on's bricks (what allocation reads at
    scale) equal what the full inventory says, with down, drained and claimed hosts."""
    rng = random.Random(7)
    for i in range(40):
        n = rng.choice([1, 2, 5, 30])
        allocate_buffer(big, buffer_maker(f"b{i}", n * 100), capacity=n * 100, pool="p", rng=rng)
    big.set_drained("h003", True)
    big.client.delete(big.keys.alive_key("h004"))
    view = big.placement_view("p")
    inv = big.inventory()
    free = inv.free_bricks("p")
    assert view.free == {h: len(b) for h, b in free.items()}
    assert "h003" not in view.free and "h004" not in view.free
    on = big.free_bricks_on("p", sorted(view.free), view.revision)
    assert {h: sorted(b) for h, b in on.items()} == {h: sorted(b) for h, b in free.items()}
    # as of the view's revision, whatever was claimed since
    allocate_buffer(big, buffer_maker("later", 100 * 100), capacity=100 * 100, pool="p")
    assert big.free_bricks_on("p", sorted(view.free), view.revision) == on


def test_the_cached_host_views_follow_every_change(store):
    """summary_inventory and placement_view keep the capacity records and alive keys from
    their last read while etcd says none changed (counts equal, nothing modified since): every
    kind of change shows at the next read, in this Store and in a new one (the file cache)."""
    from daccore.store import Store

    store.ensure_pool(pool())
    for h in ("h1", "h2", "h3"):
        store.register_host(host(h, 4))
        store.client.put(store.keys.alive_key(h), "")

    def summary(s=store):
        (x,) = summarize(s.summary_inventory())
        return x.total, x.free, x.hosts_up, x.hosts_down, x.hosts_drained

    assert summary() == (12, 12, 3, 0, 0)
    assert summary() == (12, 12, 3, 0, 0)  # from the cache
    store.client.delete(store.keys.alive_key("h3"))  # a host dies: one key fewer
    assert summary() == (8, 8, 2, 1, 0)
    store.set_drained("h2", True)  # a record changes
    assert summary() == (8, 4, 2, 1, 1)
    # one host's alive key goes and another's comes: the same count, a newer key
    store.client.delete(store.keys.alive_key("h1"))
    store.client.put(store.keys.alive_key("h3"), "")
    assert summary() == (8, 4, 2, 1, 1) and store.placement_view("p").free == {"h3": 4}
    store.register_host(host("h4", 2))
    store.client.put(store.keys.alive_key("h4"), "")
    assert summary() == (10, 6, 3, 1, 1)
    fresh = Store(store.client, store.keys.root)
    assert summary(fresh) == summary(fresh) == (10, 6, 3, 1, 1)
    assert fresh.placement_view("p").free == {"h3": 4, "h4": 2}
