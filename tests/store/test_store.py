import threading

import pytest
from records import buffer_maker, host, pool

from daccore.errors import (
    AdminError,
    BadRecord,
    CapacityError,
    Conflict,
    NotFound,
    UserError,
)
from daccore.records.models import State, Status, StatusError
from daccore.rules.inventory import summarize
from daccore.services.buffers import allocate_buffer, allocation_of
from daccore.store import AllocationConflict


def register(store, hosts=("h1", "h2"), n=4, alive=True):
    store.ensure_pool(pool())
    keepers = []
    for h in hosts:
        store.register_host(host(h, n))
        if alive:
            keepers.append(store.keep_alive(h, 5))
    return keepers


def test_ensure_pool_creates_once_and_refuses_a_different_definition(store):
    assert store.ensure_pool(pool()) == pool()
    assert store.ensure_pool(pool()) == pool()
    with pytest.raises(AdminError, match="pool 'p' is registered as .*granularity.*100"):
        store.ensure_pool(pool(granularity=200))
    assert store.pools()["p"].granularity == 100


def test_register_host_keeps_the_drained_flag_an_admin_set(store):
    store.register_host(host("h1"))
    store.set_drained("h1", True)
    store.register_host(host("h1", n=5))  # dacd restarts with one more brick
    h = store.hosts()["h1"]
    assert h.drained and len(h.bricks) == 5
    with pytest.raises(NotFound, match="unknown host 'nope'"):
        store.set_drained("nope", True)


def test_keep_alive_marks_the_host_alive_until_stopped(store):
    keeper = store.keep_alive("h1", 5)
    assert store.alive() == {"h1"}
    keeper.stop()
    assert store.alive() == set()


def test_a_hosts_status_writes_are_fenced_on_its_lease_until_a_new_one_is_bound(store):
    """dacd's fence (issue 19): once its lease lapsed (revoked here, as etcd does when a frozen
    dacd misses its TTL), its status writes and reaps raise Fenced and change nothing; its
    LeaseKeeper binds a new lease at its next refresh, calls on_bound (dacd lists its buffers
    again), and writes go through again. Another host's writes are never fenced by it."""
    import time

    from daccore.errors import Fenced

    register(store, ("h1", "h2"), alive=False)
    bound = []
    keeper = store.keep_alive("h1", 3, on_bound=lambda: bound.append(1))
    other = store.keep_alive("h2", 5)
    allocate_buffer(store, buffer_maker("j1", 100), capacity=100, pool="p")
    h = store.buffer("j1").record.allocation.primary_host
    before = Status(buffer="j1", host="h1", state=State.CREATED)
    store.put_status(before)
    store.client.lease_revoke(keeper.lease)
    after = Status(buffer="j1", host="h1", state=State.DELETED)
    with pytest.raises(
        Fenced,
        match="^host h1: this dacd's lease lapsed; it acts on no buffer "
        "until it has registered again",
    ):
        store.put_status(after)
    with pytest.raises(Fenced):
        store.put_statuses([after])
    assert store.statuses("j1")["h1"] == before
    store.put_status(Status(buffer="j1", host="h2", state=State.CREATED))  # not h1's: no fence
    if h == "h1":
        with pytest.raises(Fenced):
            store.delete_buffer("j1", store.buffer("j1").mod_revision)
    deadline = time.monotonic() + 10
    while not bound:
        assert time.monotonic() < deadline, "no new lease bound"
        time.sleep(0.05)
    store.put_status(after)
    assert store.statuses("j1")["h1"] == after and "h1" in store.alive()
    keeper.stop()
    other.stop()


def test_a_status_write_for_a_deleted_or_recreated_buffer_is_refused(store):
    """A status answers one incarnation of a buffer (issue 19): after a slurmctld restart
    Slurm tears a staging job's buffer down and sets one up again under the same name, and a
    write dacd meant for the first must never count for the second. With the incarnation
    (the spec's create_revision) the write raises Superseded and changes nothing, once the
    buffer is gone and once it is back under its name; the new incarnation's writes go
    through, for one host and for several."""
    from daccore.errors import Superseded

    keepers = register(store, ("h1", "h2"))
    allocate_buffer(store, buffer_maker("j1", 100), capacity=100, pool="p")
    first = store.buffer("j1")
    store.put_status(Status(buffer="j1", host="h1", state=State.CREATED), first.create_revision)
    store.put_status(Status(buffer="j1", host="h1", state=State.DELETED), first.create_revision)
    store.delete_buffer("j1", first.mod_revision)
    late = Status(buffer="j1", host="h1", state=State.STAGED_IN)
    with pytest.raises(
        Superseded,
        match="^buffer j1: deleted or created anew while this host "
        "acted on it; its status was not written$",
    ):
        store.put_status(late, first.create_revision)
    assert store.statuses("j1") == {}
    allocate_buffer(store, buffer_maker("j1", 100), capacity=100, pool="p")
    second = store.buffer("j1")
    assert second.create_revision > first.create_revision
    with pytest.raises(Superseded):
        store.put_status(late, first.create_revision)
    with pytest.raises(Superseded):
        store.put_statuses([late, late.model_copy(update={"host": "h2"})], first.create_revision)
    assert store.statuses("j1") == {}
    fresh = [Status(buffer="j1", host=h, state=State.CREATED) for h in ("h1", "h2")]
    store.put_statuses(fresh, second.create_revision)
    assert store.statuses("j1") == {s.host: s for s in fresh}
    for k in keepers:
        k.stop()


def test_inventory_and_pool_summary(store):
    keepers = register(store, ("h1", "h2", "h3"))
    keepers.pop().stop()  # h3 dies
    store.set_drained("h2", True)
    inv = store.inventory()
    (s,) = summarize(inv)
    assert (s.total, s.free, s.used, s.hosts_up, s.hosts_down, s.hosts_drained) == (
        8,
        4,
        0,
        2,
        1,
        1,
    )
    assert inv.revision > 0
    assert summarize(store.summary_inventory()) == [s]  # the capacity index agrees
    for k in keepers:
        k.stop()


def test_create_buffer_claims_every_brick_or_nothing(store):
    keepers = register(store, ("h1",))
    inv = store.inventory()
    bricks = inv.free_bricks("p")["h1"]
    first = buffer_maker("j1", 200)(allocation_of(bricks[:2]))
    store.create_buffer(first)
    assert store.claims() == {("h1", "b0"): "j1", ("h1", "b1"): "j1"}
    # overlaps j1 on b1: nothing of j2 may be written, not even its claim on b2
    second = buffer_maker("j2", 200)(allocation_of(bricks[1:3]))
    with pytest.raises(AllocationConflict):
        store.create_buffer(second)
    assert store.buffer("j2") is None
    assert ("h1", "b2") not in store.claims()
    with pytest.raises(UserError, match="buffer 'j1' already exists"):
        store.create_buffer(buffer_maker("j1", 100)(allocation_of(bricks[3:])))
    for k in keepers:
        k.stop()


def test_update_buffer_is_compare_and_swap(store):
    keepers = register(store, ("h1",))
    buf, rev = allocate_buffer(store, buffer_maker("j1", 100), capacity=100, pool="p")
    newer = store.update_buffer(
        buf.model_copy(update={"desired_state": State.DELETED, "generation": 2}), rev
    )
    with pytest.raises(Conflict):
        store.update_buffer(buf, rev)
    current = store.buffer("j1")
    assert current.mod_revision == newer and current.record.desired_state is State.DELETED
    for k in keepers:
        k.stop()


def test_delete_buffer_releases_claims_and_statuses(store):
    keepers = register(store, ("h1", "h2"))
    buf, rev = allocate_buffer(store, buffer_maker("j1", 300), capacity=300, pool="p")
    assert len(store.claims()) == 3
    store.put_status(
        Status(
            buffer="j1",
            host="h1",
            state=State.CREATED,
            error=StatusError(category="admin", message="mkfs failed"),
        )
    )
    assert store.statuses("j1")["h1"].error.message == "mkfs failed"
    with pytest.raises(Conflict):
        store.delete_buffer("j1", rev - 1)
    store.delete_buffer("j1", rev)
    assert store.claims() == {} and store.buffer("j1") is None and store.statuses("j1") == {}
    (s,) = summarize(store.summary_inventory())
    assert s.free == 8
    for k in keepers:
        k.stop()


def test_allocation_refuses_more_than_the_pool_holds(store):
    keepers = register(store, ("h1",), n=2)
    with pytest.raises(
        CapacityError, match="pool 'p' has 2 bricks of 100B free; the request needs 3"
    ):
        allocate_buffer(store, buffer_maker("big", 300), capacity=300, pool="p")
    assert store.buffers() == {}
    for k in keepers:
        k.stop()


def test_racing_allocations_never_claim_a_brick_twice(store):
    keepers = register(store, ("h1", "h2", "h3"), n=4)  # 12 bricks
    outcomes = {}

    def worker(w):
        for i in range(4):
            name = f"w{w}-{i}"
            try:
                allocate_buffer(store, buffer_maker(name, 100), capacity=100, pool="p")
                outcomes[name] = "ok"
            except CapacityError as e:
                outcomes[name] = str(e)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    claims = store.claims()
    winners = [n for n, o in outcomes.items() if o == "ok"]
    assert len(winners) == 12 and len(outcomes) == 24
    assert sorted(claims.values()) == sorted(winners)  # one claim each, none shared
    assert all(" free; the request needs " in o for o in outcomes.values() if o != "ok")
    for name in winners:
        bricks = store.buffer(name).record.allocation.bricks
        assert [claims[(b.host, b.brick)] for b in bricks] == [name]
    for k in keepers:
        k.stop()


def test_watch_buffers_resumes_from_a_revision(store):
    keepers = register(store, ("h1",))
    _, rev = allocate_buffer(store, buffer_maker("j1", 100), capacity=100, pool="p")
    w, changes = store.watch_buffers(start_revision=rev)
    got = []

    def consume():
        for c in changes:
            got.append((c.name, c.record.desired_state if c.record else None))
            if len(got) == 3:
                return

    t = threading.Thread(target=consume)
    t.start()
    buf = store.buffer("j1")
    rev2 = store.update_buffer(
        buf.record.model_copy(update={"desired_state": State.DELETED}), buf.mod_revision
    )
    store.delete_buffer("j1", rev2)
    t.join(5)
    w.close()
    assert got == [("j1", State.CREATED), ("j1", State.DELETED), ("j1", None)]
    for k in keepers:
        k.stop()


def test_a_corrupt_record_is_an_admin_error_naming_the_key(store):
    store.client.put(store.keys.host("bad"), "{not json")
    with pytest.raises(
        BadRecord,
        match=r"record at .*hosts/bad is not a valid Host: .*; an "
        "admin must fix or delete it",
    ):
        store.hosts()
    store.client.put(store.keys.pool("bad"), "{not json")
    assert "bad" not in store.pools()  # setup picks among the others


def test_a_held_brick_cannot_leave_its_pool_or_its_host(store):
    keepers = register(store, ("h1",), n=2)
    buf, _ = allocate_buffer(store, buffer_maker("j1", 200), capacity=200, pool="p")
    moved = host("h1", 2, pool_name="q")
    with pytest.raises(
        AdminError,
        match=r"host 'h1': brick 'b[01]' is held by buffer 'j1' in "
        r"pool 'p'; it cannot leave that pool",
    ):
        store.register_host(moved)
    with pytest.raises(AdminError, match="held by buffer 'j1'"):
        store.register_host(host("h1", 0))  # both bricks removed from the config
    assert store.register_host(host("h1", 3)).bricks[2].name == "b2"  # adding one is fine
    store.delete_buffer("j1", store.buffer("j1").mod_revision)
    assert store.register_host(moved).bricks[0].pool == "q"  # free again: may move
    for k in keepers:
        k.stop()


def test_counted_summary_matches_the_full_read_with_claims_on_down_and_drained_hosts(store):
    keepers = register(store, ("h1", "h2", "h3"), n=4)
    for i in range(5):
        allocate_buffer(store, buffer_maker(f"j{i}", 200), capacity=200, pool="p")
    store.set_drained("h2", True)
    keepers.pop().stop()  # h3 goes down holding whatever it held
    counted, full = summarize(store.summary_inventory()), summarize(store.inventory())
    assert counted == full
    (s,) = counted
    assert s.total == 8 and s.hosts_down == 1 and s.hosts_drained == 1
    assert s.used + s.free <= s.total
    for k in keepers:
        k.stop()


def test_host_summaries_add_up_to_the_pool_summary_with_down_and_drained_hosts(store):
    keepers = register(store, ("h1", "h2", "h3"), n=4)
    for i in range(5):
        allocate_buffer(store, buffer_maker(f"j{i}", 200), capacity=200, pool="p")
    store.set_drained("h2", True)
    keepers.pop().stop()  # h3 goes down holding whatever it held
    (whole,) = summarize(store.summary_inventory())
    shares = {h: summarize(store.host_summary_inventory(h, ["p"]))[0] for h in ("h1", "h2", "h3")}
    for field in ("total", "free", "used"):
        assert sum(getattr(s, field) for s in shares.values()) == getattr(whole, field), field
    assert (shares["h3"].total, shares["h3"].free, shares["h3"].used) == (0, 0, 0)
    assert shares["h2"].total == 4 and shares["h2"].free == 0
    for k in keepers:
        k.stop()


def test_a_per_buffer_mgs_takes_its_primarys_one_mgs_slot_until_the_buffer_goes(store):
    keepers = register(store, ("h1", "h2"), n=4)
    first, _ = allocate_buffer(store, buffer_maker("m1", 100), capacity=100, pool="p", own_mgs=True)
    second, _ = allocate_buffer(
        store, buffer_maker("m2", 100), capacity=100, pool="p", own_mgs=True
    )
    primaries = {first.allocation.primary_host, second.allocation.primary_host}
    assert primaries == {"h1", "h2"} and store.mgs_hosts() == {"h1", "h2"}
    assert first.allocation.mgs_host == first.allocation.primary_host
    # two bricks on one host each time: both hosts' MGS slots are taken
    with pytest.raises(CapacityError, match="already runs\n*.*another buffer.s Lustre MGS"):
        allocate_buffer(store, buffer_maker("m3", 100), capacity=100, pool="p", own_mgs=True)
    allocate_buffer(store, buffer_maker("plain", 100), capacity=100, pool="p")  # no MGS: fine
    store.delete_buffer("m1", store.buffer("m1").mod_revision)
    assert store.mgs_hosts() == {second.allocation.primary_host}
    third, _ = allocate_buffer(store, buffer_maker("m3", 100), capacity=100, pool="p", own_mgs=True)
    assert third.allocation.primary_host == first.allocation.primary_host
    for k in keepers:
        k.stop()
