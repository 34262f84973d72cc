"""Caps on persistent buffers (issue 30), on a real etcd: one owner's share of a pool and
count, and a group's, checked and kept under the owner's lock in etcd, so that parallel
creates never pass a cap together."""

import threading

import pytest
from records import host, pool

from daccore.errors import UserError
from daccore.services import jobs

POOL = pool("p", granularity=100, backend="local", placement="single_host")
CAPS = {"user_share": 0.25, "user_buffers": 0, "group_share": 1.0, "group_buffers": 0}


@pytest.fixture
def site(store):
    """Pool p: 2 hosts x 4 bricks of 100 bytes, 800 in all."""
    store.ensure_pool(POOL)
    keepers = []
    for h in ("h1", "h2"):
        store.register_host(host(h, 4, pool_name="p"))
        keepers.append(store.keep_alive(h, 5))
    yield store
    for k in keepers:
        k.stop()


def create(store, name, uid=1000, gid=1000, capacity=100, caps=None):
    jobs.create_persistent(
        store, name, uid, gid, capacity, "p", "striped", "scratch", None, caps=caps or CAPS
    )


def mine(store, uid):
    return sorted(n for n, o in store.buffer_owners().items() if o == uid)


def test_fifty_parallel_creates_of_one_user_never_pass_the_share(site):
    refusals, errors = [], []

    def one(i):
        try:
            create(site, f"b{i}")
        except UserError as e:
            refusals.append(str(e))
        except Exception as e:  # noqa: BLE001 - any other failure fails the test below
            errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert len(mine(site, 1000)) == 2 and len(refusals) == 48  # a quarter of 800: 200
    assert set(refusals) == {
        "create_persistent: uid 1000's persistent buffers in pool 'p' would hold 300B of its "
        "800B; one user may hold 25% (200B; persistent_caps.user_share in dac.yaml): destroy "
        "one first, or ask an admin"
    }
    create(site, "other", uid=1001, gid=1001, capacity=200)  # room is left for others


def test_count_and_group_caps(site):
    caps = {**CAPS, "user_share": 1.0, "user_buffers": 1}
    create(site, "one", caps=caps)
    with pytest.raises(UserError) as e:
        create(site, "two", caps=caps)
    assert str(e.value) == (
        "create_persistent: uid 1000 holds 1 persistent buffers, the most "
        "one user may (persistent_caps.user_buffers in dac.yaml): destroy "
        "one first, or ask an admin"
    )
    caps = {**CAPS, "group_share": 0.5}
    create(site, "g1", uid=2001, gid=50, capacity=200, caps=caps)
    create(site, "g2", uid=2002, gid=50, capacity=200, caps=caps)
    with pytest.raises(
        UserError,
        match="^create_persistent: group 50's persistent buffers in "
        "pool 'p' would hold 500B of its 800B; one group may "
        "hold 50%",
    ):
        create(site, "g3", uid=2003, gid=50, caps=caps)
    assert site.buffer("g3") is None


def test_a_lock_left_by_a_dead_call_goes_with_its_lease(site):
    key = site.keys.owner_lock(1000)
    lease = site.client.lease_grant(2)
    site.client.put(key, "", lease)  # as a call killed while holding it leaves it
    create(site, "after", caps=CAPS)  # waits until the lease runs out, then goes on
    assert mine(site, 1000) == ["after"] and site.client.get(key) is None
