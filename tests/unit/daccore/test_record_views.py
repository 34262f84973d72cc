"""The lean views of the pool, host and host-capacity records (daccore.rules.inventory: what
the Slurm hooks and placement read from JSON without pydantic) against the models
(daccore.records.models): the same values for the same record, and the same defaults for a
record that leaves a field out, so neither can drift from the other. The buffer's and the
status's views are tied in test_buffer_doc.py; the config's in test_config_cache.py."""

import json

import pytest

from daccore.records.models import Brick, Host, HostCapacity, Pool
from daccore.rules import inventory

GiB = 1 << 30


def _raw(record) -> bytes:
    return json.dumps(record.model_dump(mode="json")).encode()


POOLS = [
    Pool(name="p", granularity=GiB),
    Pool(name="q", granularity=2 * GiB, backend="lustre", placement="across_servers", swap=True),
]


@pytest.mark.parametrize("pool", POOLS, ids=lambda p: p.name)
def test_a_pool_reads_as_the_model(pool):
    info = inventory.parse_pools([_raw(pool)])[pool.name]
    assert set(info._fields) <= set(Pool.model_fields)
    assert info._asdict() == {f: pool.model_dump(mode="json")[f] for f in info._fields}


def test_a_pool_without_its_optional_fields_gets_the_models_defaults():
    minimal = {"name": "p", "granularity": GiB}
    info = inventory.parse_pools([json.dumps(minimal).encode()])["p"]
    model = Pool.model_validate(minimal).model_dump(mode="json")
    assert info._asdict() == {f: model[f] for f in info._fields}


HOST = Host(
    name="h1",
    drained=True,
    warnings=["fs_root is world-readable"],
    bricks=[
        Brick(name="b0", device="/dev/nvme0n1", capacity=GiB, pool="p"),
        Brick(
            name="b1",
            device="/dev/nvme1n1",
            capacity=2 * GiB,
            pool="q",
            socket=1,
            pcie_switch="s2",
        ),
    ],
)


def test_a_host_reads_as_the_model():
    inv = inventory.Inventory.from_json([], {"h1"}, hosts=[_raw(HOST)])
    info = inv.hosts["h1"]
    assert (info.name, info.alive, info.drained, info.warnings) == (
        "h1",
        True,
        HOST.drained,
        HOST.warnings,
    )
    fields = [f for f in inventory.BrickInfo._fields if f != "host"]
    assert set(fields) <= set(Brick.model_fields)
    assert [b._asdict() for b in info.bricks] == [
        {"host": "h1", **{f: b.model_dump(mode="json")[f] for f in fields}} for b in HOST.bricks
    ]


def test_a_host_without_its_optional_fields_gets_the_models_defaults():
    brick = {"name": "b0", "device": "/dev/sda", "capacity": GiB, "pool": "p"}
    minimal = {"name": "h1", "bricks": [brick]}
    inv = inventory.Inventory.from_json([], set(), hosts=[json.dumps(minimal).encode()])
    info, model = inv.hosts["h1"], Host.model_validate(minimal)
    assert (info.drained, info.warnings) == (model.drained, model.warnings)
    b, m = info.bricks[0], model.bricks[0]
    assert (b.socket, b.pcie_switch) == (m.socket, m.pcie_switch)


def test_a_host_capacity_reads_as_the_model_and_as_the_host_it_indexes():
    cap = HostCapacity.of(HOST)
    (view,) = inventory.views_of([_raw(cap)], {"h1"})
    assert set(view._fields) - {"alive"} <= set(HostCapacity.model_fields)
    assert (view.name, view.alive, view.drained, view.pools) == ("h1", True, True, cap.pools)
    # the index and the host record give the summary the same view
    inv = inventory.Inventory.from_json([], {"h1"}, hosts=[_raw(HOST)])
    assert inv.views() == [view]
    minimal = {"name": "h2"}
    (bare,) = inventory.views_of([json.dumps(minimal).encode()], set())
    model = HostCapacity.model_validate(minimal)
    assert (bare.drained, bare.pools) == (model.drained, model.pools)


def test_records_the_model_refuses_are_left_out_of_the_lean_view():
    # the shape checks keep out what pydantic would refuse in the fields the views read
    bad_pool = {"name": "p", "granularity": 0}
    bad_cap = {"name": "h", "pools": {"p": -1}}
    for model, doc in ((Pool, bad_pool), (HostCapacity, bad_cap)):
        with pytest.raises(ValueError):
            model.model_validate(doc)
    assert inventory.parse_pools([json.dumps(bad_pool).encode()]) == {}
    assert inventory.views_of([json.dumps(bad_cap).encode()], set()) == []
