"""Sampled placement (issue 20): an allocation counts the claims of a random sample of the
pool's hosts only, widens to every host when the sample cannot hold the buffer, and refuses
only from every host's count, with the message it gave before sampling. Real etcd."""

import json
import random

import pytest
from records import buffer_maker, host, pool

from daccore.errors import CapacityError
from daccore.etcd.types import put_op
from daccore.records.models import Host
from daccore.rules import allocator
from daccore.rules.allocator import SAMPLE_HOSTS, plan
from daccore.services import buffers
from daccore.services.buffers import allocate_buffer

HOSTS, BRICKS = 2 * SAMPLE_HOSTS, 4  # twice a sample: half the hosts are left out of each


def names():
    return [f"h{h:03d}" for h in range(HOSTS)]


@pytest.fixture
def site(store):
    """HOSTS live hosts x BRICKS bricks of 100 B in pool 'p' (across servers) and 's' (one
    host), and a count of the claim counts each transaction asks etcd for."""
    store.ensure_pool(pool())
    store.ensure_pool(pool("s", placement="single_host"))
    for name in names():
        bricks = host(name, BRICKS).bricks + [
            b.model_copy(update={"name": f"b{BRICKS + i}", "device": f"/dev/{name}-s{i}"})
            for i, b in enumerate(host(name, BRICKS, pool_name="s").bricks)
        ]
        store.register_host(Host(name=name, bricks=bricks))
        store.client.put(store.keys.alive_key(name), "")
    store.claim_counts = []
    real = store.client.txn

    def txn(compare, success, failure=()):
        store.claim_counts.append(
            sum(1 for op in success if op.count_only and op.key.startswith(store.keys.claims))
        )
        return real(compare, success, failure)

    store.client.txn = txn
    return store


def fill(store, pool_name, keep: dict[str, int]):
    """Claim every brick of `pool_name`, but `keep[host]` free bricks on the hosts named."""
    k = store.keys
    offset = 0 if pool_name == "p" else BRICKS
    ops = [
        put_op(k.claim(pool_name, h, f"b{offset + i}"), json.dumps({"buffer": "filler"}))
        for h in names()
        for i in range(keep.get(h, 0), BRICKS)
    ]
    for start in range(0, len(ops), 100):
        store.client.txn([], ops[start : start + 100])


def leaving_out(monkeypatch, *hosts):
    """Samples never hold `hosts`: SAMPLE_HOSTS hosts of the others."""

    def sample(pools, bricks, capacity, pool_name, rng):
        return [h for h in sorted(bricks) if h not in hosts][:SAMPLE_HOSTS]

    monkeypatch.setattr(buffers, "sample", sample)


def test_a_sampled_placement_counts_only_its_sample(site):
    site.claim_counts.clear()
    buf, _ = allocate_buffer(site, buffer_maker("one", 100), capacity=100, pool="p")
    assert sum(site.claim_counts) == SAMPLE_HOSTS  # not HOSTS: one transaction of counts
    assert len(buf.allocation.bricks) == 1


def test_a_buffer_needing_most_hosts_counts_all(site):
    """A buffer of a quarter of the hosts' count would want SAMPLE_HEADROOM times as many
    hosts as it has bricks in its sample: every host is counted, as before sampling."""
    site.claim_counts.clear()
    n = HOSTS // allocator.SAMPLE_HEADROOM
    buf, _ = allocate_buffer(site, buffer_maker("wide", n * 100), capacity=n * 100, pool="p")
    assert sum(site.claim_counts) == HOSTS
    assert len({b.host for b in buf.allocation.bricks}) == n  # a brick a server


def test_the_sample_widens_when_only_hosts_outside_it_have_room(site, monkeypatch):
    fill(site, "p", {"h127": 2})
    leaving_out(monkeypatch, "h127")
    site.claim_counts.clear()
    buf, _ = allocate_buffer(site, buffer_maker("two", 200), capacity=200, pool="p")
    assert sorted((b.host for b in buf.allocation.bricks)) == ["h127", "h127"]
    assert sum(site.claim_counts) == HOSTS  # the sample, then the rest: each host once


def test_a_best_fit_outside_the_sample_is_found_when_the_sample_has_none(site, monkeypatch):
    fill(site, "s", {"h000": 1, "h127": 3})
    leaving_out(monkeypatch, "h127")
    buf, _ = allocate_buffer(site, buffer_maker("three", 300, "s"), capacity=300, pool="s")
    assert {b.host for b in buf.allocation.bricks} == {"h127"}


def test_across_servers_widens_rather_than_give_a_server_a_second_brick(site, monkeypatch):
    """The sample has room for both bricks on one host only; hosts outside it have one free
    each: the buffer gets a brick on each of two servers, as without sampling."""
    fill(site, "p", {"h000": 2, "h126": 1, "h127": 1})
    leaving_out(monkeypatch, "h126", "h127")
    buf, _ = allocate_buffer(
        site, buffer_maker("spread", 200), capacity=200, pool="p", rng=random.Random(1)
    )
    hosts = [b.host for b in buf.allocation.bricks]
    assert len(set(hosts)) == 2 and set(hosts) <= {"h000", "h126", "h127"}


@pytest.mark.parametrize(
    "pool_name, keep, n, message",
    [
        (
            "p",
            {"h001": 1, "h127": 2},
            4,
            "pool 'p' has 3 bricks of 100B free; the request needs 4 (400B)",
        ),
        (
            "s",
            {"h001": 1, "h127": 2},
            3,
            "no host in pool 's' has 3 bricks of 100B free (the most on one host is 2); this pool "
            "keeps a buffer on one host",
        ),
    ],
)
def test_a_full_pool_is_refused_from_every_hosts_count_with_the_same_message(
    site, monkeypatch, pool_name, keep, n, message
):
    """The host with the most room is outside the sample: the message still names it, as
    `plan` on every host's count (no sampling) words it."""
    fill(site, pool_name, keep)
    view = site.placement_view(pool_name)  # every host counted: what placement saw before
    with pytest.raises(CapacityError) as full:
        plan(view.pools, view.free, n * 100, pool_name)
    assert str(full.value) == message
    leaving_out(monkeypatch, "h127")
    site.claim_counts.clear()
    with pytest.raises(CapacityError) as sampled:
        allocate_buffer(
            site, buffer_maker("nope", n * 100, pool_name), capacity=n * 100, pool=pool_name
        )
    assert str(sampled.value) == message
    assert sum(site.claim_counts) == HOSTS
    assert site.buffers() == {}
