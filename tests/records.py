"""Records for store tests."""

from daccore.records.models import Brick, Buffer, BufferRequest, Host, Pool


def pool(name="p", granularity=100, backend="local", placement="across_servers", swap=False):
    return Pool(name=name, granularity=granularity, backend=backend, placement=placement, swap=swap)


def host(name, n=4, pool_name="p", capacity=100):
    return Host(
        name=name,
        bricks=[
            Brick(
                name=f"b{i}",
                device=f"/dev/{name}-{i}",
                capacity=capacity,
                pool=pool_name,
                pcie_switch=str(i % 2),
            )
            for i in range(n)
        ],
    )


def buffer_maker(name, capacity, pool_name="p", uid=1000):
    def make(allocation):
        return Buffer(
            name=name,
            owner_uid=uid,
            owner_gid=uid,
            job_id=None,
            request=BufferRequest(capacity=capacity, pool=pool_name),
            allocation=allocation,
        )

    return make
