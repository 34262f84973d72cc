"""The daos backend's plan for a buffer: the ranks of its bricks and the pool's size on each."""

import pytest

from daccore.backends import get
from daccore.backends.daos import DaosBackend
from daccore.errors import AdminError
from daccore.records.models import Allocation, BrickRef, Buffer, BufferRequest
from daccore.settings.config import DacConfig

GiB = 1 << 30


def daos_backend(config: DacConfig, host: str) -> DaosBackend:
    """The backend `get` finds by name, as dacd gets it."""
    backend = get("daos", config, host)
    assert isinstance(backend, DaosBackend)
    return backend


def config(brick=100 * GiB, **daos):
    return DacConfig.model_validate(
        {
            "pools": {"d": {"granularity": 100 * GiB, "backend": "daos", "daos": daos}},
            "hosts": {
                h: {
                    "daos_ranks": {0: 2 * i, 1: 2 * i + 1},
                    "bricks": [
                        {
                            "device": f"/dev/nvme{b}n1",
                            "capacity": brick,
                            "pool": "d",
                            "socket": b % 2,
                        }
                        for b in range(4)
                    ],
                }
                for i, h in enumerate(("dac1", "dac2", "dac3"))
            },
        }
    )


def buffer(bricks, capacity, brick=100 * GiB):
    return Buffer(
        name="42",
        owner_uid=0,
        owner_gid=0,
        created_at=1.0,
        request=BufferRequest(capacity=capacity, pool="d"),
        allocation=Allocation(
            primary_host=bricks[0][0],
            bricks=[
                BrickRef(host=h, brick=f"nvme{b}n1", device=f"/dev/nvme{b}n1", capacity=brick)
                for h, b in bricks
            ],
        ),
    )


def test_each_rank_gives_the_nvme_of_its_fewest_bricks_and_scm_in_proportion():
    # dac1: nvme0n1 and nvme2n1 on socket 0 (rank 0), nvme1n1 on socket 1 (rank 1); dac2 rank 2
    b = buffer([("dac1", 0), ("dac1", 2), ("dac1", 1), ("dac2", 0)], 400 * GiB, 150 * GiB)
    backend = daos_backend(config(brick=150 * GiB), "dac1")
    assert backend.ranks(b) == [0, 1, 2]
    scm, nvme = backend.tier_bytes(b)
    assert nvme == 150 * GiB and scm == int(150 * GiB * 6 / 94) >> 20 << 20
    v = backend.variables(b, "create")
    assert (v["scm_size"], v["nvme_size"], v["ranks"]) == (str(scm), str(nvme), "0,1,2")
    b10 = daos_backend(config(brick=150 * GiB, scm_percent=10), "dac1")
    assert b10.tier_bytes(b)[0] == int(150 * GiB / 9) >> 20 << 20


def test_an_allocation_too_uneven_for_the_capacity_asked_is_refused_in_one_line():
    b = buffer([("dac1", 0), ("dac1", 2), ("dac2", 0)], 300 * GiB)
    with pytest.raises(AdminError) as e:
        daos_backend(config(), "dac1").tier_bytes(b)
    assert str(e.value).count("\n") == 0
    assert "the same NVMe on each of its ranks" in str(e.value)
    assert "would hold 200GiB of the 300GiB asked" in str(e.value)
