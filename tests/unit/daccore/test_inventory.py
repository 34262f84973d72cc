import json

from hypothesis import given, settings
from hypothesis import strategies as st

from daccore.rules.inventory import ClaimCounts, Inventory, summarize, views_of


def test_summary_counts_live_free_used_and_drained():
    pools = [json.dumps({"name": "p", "granularity": 10, "backend": "local"}).encode()]

    def host(name, n, drained=False):
        return json.dumps(
            {
                "name": name,
                "drained": drained,
                "bricks": [
                    {"name": f"b{i}", "device": f"/dev/{i}", "capacity": 10, "pool": "p"}
                    for i in range(n)
                ],
            }
        ).encode()

    inv = Inventory.from_json(
        pools,
        alive={"up", "dr"},
        claims={("p", "up", "b0"): "", ("p", "dr", "b1"): "", ("p", "down", "b0"): ""},
        hosts=[host("up", 4), host("down", 3), host("dr", 2, True)],
    )
    (s,) = summarize(inv)
    assert (s.total, s.free, s.used) == (6, 3, 2)
    assert (s.hosts_up, s.hosts_down, s.hosts_drained) == (2, 1, 1)
    assert s.as_dict()["free_bytes"] == 30
    assert sorted(inv.free_bricks("p")) == ["up"]
    # kept by the answerer (freeze_summary): the same summary, each caller its own list
    assert inv.freeze_summary() is inv
    kept = summarize(inv)
    assert kept == [s] and kept is not summarize(inv)
    kept.clear()
    assert summarize(inv) == [s]


from daccore.records.models import Brick, Host, HostCapacity  # noqa: E402


@st.composite
def sites(draw):
    hosts = []
    for h in range(draw(st.integers(1, 6))):
        pools = draw(st.lists(st.sampled_from(["p", "q", "r"]), min_size=0, max_size=5))
        hosts.append(
            Host(
                name=f"h{h}",
                drained=draw(st.booleans()),
                bricks=[
                    Brick(name=f"b{i}", device=f"/dev/b{i}", capacity=10, pool=pool)
                    for i, pool in enumerate(pools)
                ],
            )
        )
    bricks = [(b.pool, h.name, b.name) for h in hosts for b in h.bricks]
    claimed = draw(st.lists(st.sampled_from(bricks), unique=True)) if bricks else []
    alive = draw(st.sets(st.sampled_from([h.name for h in hosts])))
    return hosts, {c: "" for c in claimed}, alive


@settings(max_examples=200, deadline=None)
@given(sites())
def test_counted_claims_and_the_capacity_index_summarize_like_the_full_records(site):
    """What Store.summary_inventory reads (capacity indexes, claims counted per pool and per
    down or drained host) gives the same summary as every record and every claim."""
    hosts, claims, alive = site
    pools = [json.dumps({"name": p, "granularity": 10}).encode() for p in ("p", "q")]
    full = Inventory.from_json(
        pools, alive, claims=claims, hosts=[h.model_dump_json().encode() for h in hosts]
    )
    views = views_of([HostCapacity.of(h).model_dump_json().encode() for h in hosts], alive)
    counts = ClaimCounts()
    for pool, host, _ in claims:
        counts.per_pool[pool] = counts.per_pool.get(pool, 0) + 1
        special = next(v for v in views if v.name == host)
        if not special.alive or special.drained:
            counts.per_host[(pool, host)] = counts.per_host.get((pool, host), 0) + 1
    index = Inventory.of_counts(full.pools, views, counts)
    assert summarize(index) == summarize(full)
    # and the direct construction from HostInfo + (host, brick) claims agrees too
    direct = Inventory(full.pools, full.hosts, full.claimed)
    assert summarize(direct) == summarize(full)
