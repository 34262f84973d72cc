import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daccore.errors import CapacityError, NotFound, UserError
from daccore.rules.allocator import SAMPLE_HEADROOM, SAMPLE_HOSTS, crowded, place, sample
from daccore.rules.inventory import BrickInfo, HostInfo, Inventory, PoolInfo

G = 100  # granularity of the test pool


def inventory(layout, claimed=(), dead=(), drained=(), placement="across_servers"):
    """layout: {host: [(socket, switch), ...]} -> Inventory with bricks b0, b1, ..."""
    hosts = {}
    for h, bricks in layout.items():
        hosts[h] = HostInfo(
            h,
            h not in dead,
            h in drained,
            [
                BrickInfo(h, f"b{i}", f"/dev/{h}-{i}", G, "p", sock, sw)
                for i, (sock, sw) in enumerate(bricks)
            ],
        )
    return Inventory(
        {"p": PoolInfo("p", G, "lustre", placement)}, hosts, {c: "other" for c in claimed}
    )


def test_capacity_rounds_up_to_granularity():
    inv = inventory({"h1": [(0, "0")] * 4, "h2": [(0, "0")] * 4})
    assert len(place(inv, 1, "p")) == 1
    assert len(place(inv, G, "p")) == 1
    assert len(place(inv, G + 1, "p")) == 2


def test_across_servers_uses_every_host_before_doubling_up():
    inv = inventory({f"h{i}": [(0, "0")] * 4 for i in range(3)})
    hosts = Counter(b.host for b in place(inv, 3 * G, "p"))
    assert sorted(hosts.values()) == [1, 1, 1]
    hosts = Counter(b.host for b in place(inv, 5 * G, "p"))
    assert sorted(hosts.values()) == [1, 2, 2]


def test_within_a_host_pcie_switches_and_sockets_spread_first():
    inv = inventory({"h": [(0, "a"), (0, "a"), (0, "b"), (0, "b"), (1, "c"), (1, "c")]})
    picked = place(inv, 3 * G, "p", "single_host")
    assert sorted(b.pcie_switch for b in picked) == ["a", "b", "c"]
    picked = place(inv, 2 * G, "p", "single_host")
    assert sorted(b.socket for b in picked) == [0, 1]


def test_single_host_keeps_the_buffer_on_one_host_and_picks_the_best_fit():
    inv = inventory({"big": [(0, "0")] * 8, "small": [(0, "0")] * 3}, placement="single_host")
    assert {b.host for b in place(inv, 3 * G, "p")} == {"small"}
    assert {b.host for b in place(inv, 4 * G, "p")} == {"big"}


def test_single_host_refuses_when_no_host_is_big_enough_even_if_the_pool_is():
    inv = inventory({"a": [(0, "0")] * 2, "b": [(0, "0")] * 2}, placement="single_host")
    with pytest.raises(
        CapacityError,
        match="no host in pool 'p' has 3 bricks of 100B free .* most on one host is 2",
    ):
        place(inv, 3 * G, "p")


def test_never_a_dead_drained_or_claimed_brick():
    inv = inventory(
        {"dead": [(0, "0")] * 4, "drained": [(0, "0")] * 4, "ok": [(0, "0")] * 2},
        claimed=[("ok", "b0")],
        dead=["dead"],
        drained=["drained"],
    )
    assert [(b.host, b.name) for b in place(inv, G, "p")] == [("ok", "b1")]
    with pytest.raises(CapacityError, match="pool 'p' has 1 brick of 100B free; .* needs 2"):
        place(inv, 2 * G, "p")


def test_unknown_pool_and_bad_capacity_are_user_errors():
    inv = inventory({"h": [(0, "0")]})
    with pytest.raises(NotFound, match=r"unknown pool 'q' \(pools: p\)"):
        place(inv, G, "q")
    for bad in (0, -5):
        with pytest.raises(UserError, match="greater than zero"):
            place(inv, bad, "p")


def test_ties_are_broken_by_the_rng_so_racing_allocators_differ():
    inv = inventory({f"h{i}": [(0, "0")] * 4 for i in range(10)})
    picks = {
        tuple((b.host, b.name) for b in place(inv, G, "p", rng=random.Random(s))) for s in range(20)
    }
    assert len(picks) > 5


# -- properties --------------------------------------------------------------------------------

layouts = st.dictionaries(
    st.sampled_from([f"h{i}" for i in range(8)]),
    st.lists(st.tuples(st.integers(0, 1), st.sampled_from("abc")), min_size=0, max_size=6),
    min_size=1,
)


@st.composite
def scenarios(draw):
    layout = draw(layouts)
    all_bricks = [(h, f"b{i}") for h, bs in layout.items() for i in range(len(bs))]
    claimed = draw(st.lists(st.sampled_from(all_bricks), unique=True)) if all_bricks else []
    dead = draw(st.lists(st.sampled_from(sorted(layout)), unique=True))
    drained = draw(st.lists(st.sampled_from(sorted(layout)), unique=True))
    policy = draw(st.sampled_from(["single_host", "across_servers"]))
    capacity = draw(st.integers(1, 12 * G))
    seed = draw(st.integers(0, 1000))
    return inventory(layout, claimed, dead, drained), policy, capacity, seed


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_placement_properties(scenario):
    inv, policy, capacity, seed = scenario
    free = inv.free_bricks("p")
    needed = -(-capacity // G)
    try:
        picked = place(inv, capacity, "p", policy, random.Random(seed))
    except CapacityError:
        if policy == "single_host":
            assert all(len(b) < needed for b in free.values())
        else:
            assert sum(len(b) for b in free.values()) < needed
        return
    # never more than asked, rounded up
    assert len(picked) == needed
    keys = [(b.host, b.name) for b in picked]
    assert len(set(keys)) == len(keys)
    for b in picked:
        host = inv.hosts[b.host]
        assert host.alive and not host.drained
        assert (b.host, b.name) not in inv.claimed
    per_host = Counter(b.host for b in picked)
    if policy == "single_host":
        assert len(per_host) == 1
    else:
        # spread: a host gets a second brick only when every other host is used up or equal
        for _h, n in per_host.items():
            for other, bricks in free.items():
                if per_host.get(other, 0) + 1 < n:
                    assert per_host.get(other, 0) == len(bricks)
    # within each host, PCIe switch groups are spread the same way
    for h in per_host:
        groups = Counter((b.socket, b.pcie_switch) for b in free[h])
        used = Counter((b.socket, b.pcie_switch) for b in picked if b.host == h)
        for _g, n in used.items():
            for other, size in groups.items():
                if used.get(other, 0) + 1 < n:
                    assert used.get(other, 0) == size


@pytest.mark.parametrize("placement", ["across_servers", "single_host"])
def test_a_buffer_with_its_own_mgs_never_leads_from_a_host_running_one(placement):
    inv = inventory({f"h{i}": [(0, "0")] * 4 for i in range(3)}, placement=placement)
    for seed in range(50):
        bricks = place(inv, 2 * G, "p", rng=random.Random(seed), busy_mgs={"h0", "h2"})
        assert bricks[0].host == "h1"
    with pytest.raises(CapacityError, match="already runs another buffer's Lustre MGS"):
        place(inv, G, "p", busy_mgs={"h0", "h1", "h2"})


def test_a_sample_is_sample_hosts_or_headroom_per_brick_and_all_of_a_small_pool():
    pools = {"p": PoolInfo("p", G, "lustre", "across_servers")}
    bricks = {f"h{i:04d}": 24 for i in range(1000)}
    rng = random.Random(0)
    one = sample(pools, bricks, G, "p", rng)
    assert len(one) == len(set(one)) == SAMPLE_HOSTS and set(one) <= set(bricks)
    assert sample(pools, bricks, G, "p", rng) != one  # at random
    assert len(sample(pools, bricks, 100 * G, "p", rng)) == SAMPLE_HEADROOM * 100
    assert sorted(sample(pools, bricks, 2048 * G, "p", rng)) == sorted(bricks)
    few = {f"h{i}": 4 for i in range(SAMPLE_HOSTS)}
    assert sorted(sample(pools, few, G, "p", rng)) == sorted(few)


def test_only_a_server_given_a_second_brick_across_servers_is_crowded():
    pools = {"p": PoolInfo("p", G, "lustre", "across_servers")}
    assert not crowded(pools, {"h1": 1, "h2": 1}, "p")
    assert crowded(pools, {"h1": 2, "h2": 1}, "p")
    assert not crowded(pools, {"h1": 3}, "p", "single_host")
