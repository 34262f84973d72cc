import json

from daccore.inventory import Inventory, summarize


def test_summary_counts_live_free_used_and_drained():
    pools = [json.dumps({"name": "p", "granularity": 10, "backend": "local"}).encode()]

    def host(name, n, drained=False):
        return json.dumps({"name": name, "drained": drained, "bricks": [
            {"name": f"b{i}", "device": f"/dev/{i}", "capacity": 10, "pool": "p"}
            for i in range(n)]}).encode()

    inv = Inventory.from_json(pools, [host("up", 4), host("down", 3), host("dr", 2, True)],
                              alive={"up", "dr"},
                              claimed={("up", "b0"): "", ("dr", "b1"): "", ("down", "b0"): ""})
    (s,) = summarize(inv)
    assert (s.total, s.free, s.used) == (6, 3, 2)
    assert (s.hosts_up, s.hosts_down, s.hosts_drained) == (2, 1, 1)
    assert s.as_dict()["free_bytes"] == 30
    assert sorted(inv.free_bricks("p")) == ["up"]
