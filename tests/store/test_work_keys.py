"""Every write of a spec puts `work/<host>/<buffer>` for the hosts that act on it, in the same
transaction, and its delete drops them (issue 20): a dacd watches its own work keys instead of
every spec, so a writer that forgot them would leave a buffer unseen. Real etcd."""

import pytest
from records import buffer_maker, host, pool

from daccore.records.keys import prefix_end
from daccore.records.models import State
from daccore.services import admin, jobs
from daccore.services.buffers import allocation_of
from daccore.store import CLAIMS_PER_TXN, AllocationConflict


def work(store) -> dict[tuple[str, str], int]:
    """(host, buffer) -> the work key's mod_revision."""
    k = store.keys
    kvs, _ = store.client.range(k.works, prefix_end(k.works))
    return {tuple(kv.key[len(k.works) :].split("/", 1)): kv.mod_revision for kv in kvs}


def site(store, backend="local", hosts=3, bricks=2):
    store.ensure_pool(pool(backend=backend))
    names = [f"h{i:03d}" for i in range(hosts)]
    for h in names:
        store.register_host(host(h, bricks))
        store.client.put(store.keys.alive_key(h), "")
    return names


def spread(store, name, hosts):
    """A buffer of one brick on each of `hosts`, created by `create_buffer`."""
    inv = store.inventory()
    free = inv.free_bricks("p")
    buf = buffer_maker(name, 100 * len(hosts))(allocation_of([free[h][0] for h in hosts]))
    return buf, store.create_buffer(buf)


def changed_by(store, before, name):
    """The hosts whose work key of `name` was written after `before`."""
    return {h for (h, b), rev in work(store).items() if b == name and rev > before}


def test_a_local_buffer_wakes_each_of_its_hosts_at_every_write_and_its_delete_drops_them(store):
    hosts = site(store)
    buf, rev = spread(store, "j1", hosts[:2])
    assert work(store) == {(hosts[0], "j1"): rev, (hosts[1], "j1"): rev}
    # every writer of the spec: desired state, attachments, a validated update
    for write in (
        lambda: jobs.set_desired(store, "j1", State.STAGED_IN),
        lambda: jobs.attach(store, "7", ["n1"], ["j1"]),
        lambda: jobs.detach(store, "7", ["j1"]),
        lambda: store.update_buffer(
            store.buffer("j1").record.model_copy(update={"generation": 9}),
            store.buffer("j1").mod_revision,
        ),
    ):
        before = store.buffer("j1").mod_revision
        write()
        after = store.buffer("j1").mod_revision
        assert after > before
        assert work(store) == {(hosts[0], "j1"): after, (hosts[1], "j1"): after}
    assert store.client.get(store.keys.work(hosts[0], "j1")).value in ("9", b"9")
    store.delete_buffer("j1", store.buffer("j1").mod_revision)
    assert work(store) == {} and store.claims() == {}


@pytest.mark.parametrize("backend", ["lustre", "daos"])
def test_where_the_primary_runs_every_step_only_the_primary_is_woken(store, backend):
    hosts = site(store, backend)
    buf, rev = spread(store, "wide", hosts)
    primary = buf.allocation.primary_host
    assert work(store) == {(primary, "wide"): rev}
    before = rev
    jobs.set_desired(store, "wide", State.DELETED)
    assert changed_by(store, before, "wide") == {primary}
    assert set(work(store)) == {(primary, "wide")}
    store.delete_buffer("wide", store.buffer("wide").mod_revision)
    assert work(store) == {}


def test_a_pool_without_a_record_wakes_every_host(store):
    """Unknown backend: a wake-up too many is harmless, one too few is not."""
    hosts = site(store)
    store.client.delete(store.keys.pool("p"))
    fresh = type(store)(store.client, store.keys.root)  # no pool read yet
    spread(fresh, "j", hosts)
    assert set(work(store)) == {(h, "j") for h in hosts}


def test_persistent_buffers_and_their_destroy_wake_their_hosts(store):
    site(store)
    jobs.create_persistent(store, "scratch1", 1000, 1000, 200, "p", "striped", "scratch", None)
    buf = store.buffer("scratch1")
    acting = {(h, "scratch1") for h in buf.record.allocation.hosts}
    assert set(work(store)) == acting
    jobs.destroy(store, "scratch1", 1000)
    now = store.buffer("scratch1").mod_revision
    assert {k for k, rev in work(store).items() if rev == now} == acting


def test_forget_drops_the_work_keys_with_the_spec(store):
    hosts = site(store)
    spread(store, "lost", hosts[:2])
    for h in hosts:  # its hosts are gone for good
        store.client.delete(store.keys.alive_key(h))
    assert len(work(store)) == 2
    assert admin.forget(store, "lost", 0) == hosts[:2]
    assert work(store) == {} and store.buffer("lost") is None


@pytest.mark.parametrize("spread_over", [60, 128])
def test_a_local_buffer_over_more_hosts_than_one_transaction_holds_wakes_them_all(
    store, spread_over
):
    """60 hosts: the claims fit in one transaction, not with 60 work keys besides; 128: the
    claims are made in chunks. Either way every host gets its key, each write touches them
    all, and the delete leaves none."""
    hosts = site(store, hosts=128, bricks=1)
    buf, rev = spread(store, "wide", hosts[:spread_over])
    assert (len(buf.allocation.bricks) > CLAIMS_PER_TXN) == (spread_over > CLAIMS_PER_TXN)
    assert set(work(store)) == {(h, "wide") for h in hosts[:spread_over]}
    before = store.buffer("wide").mod_revision
    jobs.set_desired(store, "wide", State.DELETED)
    assert changed_by(store, before, "wide") == set(hosts[:spread_over])
    store.delete_buffer("wide", store.buffer("wide").mod_revision)
    assert work(store) == {} and store.claims() == {} and store.buffer("wide") is None


def test_an_allocation_that_fails_leaves_no_work_key(store):
    hosts = site(store, hosts=2, bricks=1)
    bricks = [b for h in hosts for b in store.inventory().free_bricks("p")[h]]
    store.create_buffer(buffer_maker("a", 100)(allocation_of(bricks[:1])))
    with pytest.raises(AllocationConflict):
        store.create_buffer(buffer_maker("b", 200)(allocation_of(bricks)))
    assert set(work(store)) == {(hosts[0], "a")}


def test_stray_work_keys_are_dropped_and_live_ones_kept(store):
    hosts = site(store, hosts=2)
    spread(store, "live", hosts[:1])
    store.client.put(store.keys.work(hosts[0], "gone"), "3")
    store.client.put(store.keys.work(hosts[1], "live"), "1")  # no brick of it on h001
    assert store.drop_stray_work(hosts[1], ["p"]) == ["live"]
    assert store.drop_stray_work(hosts[0], ["p"]) == ["gone"]
    assert set(work(store)) == {(hosts[0], "live")}


def test_spec_revisions_name_only_the_buffers_that_exist(store):
    hosts = site(store)
    _, rev = spread(store, "x", hosts[:1])
    assert store.spec_revisions(["x", "nope"]) == {"x": rev}
