from fractions import Fraction

from daccore.errors import Kind
from daccore.records.models import (
    Allocation,
    BrickRef,
    Buffer,
    BufferRequest,
    StageRequest,
    Status,
    StatusError,
)
from daccore.rules.directives import parse_script
from daccore.services.admin_views import buffer_detail
from daccore.services.estimate import report
from dacctl import render

MiB = 1 << 20


def test_show_prints_the_spec_each_host_and_the_tail_of_an_errors_detail():
    buf = Buffer(
        name="7",
        owner_uid=1234,
        owner_gid=4321,
        job_id=7,
        generation=2,
        request=BufferRequest(
            capacity=512 * MiB,
            pool="default",
            stage_in=[
                StageRequest(type="directory", source="/data", destination="$DW_JOB_STRIPED/in")
            ],
        ),
        allocation=Allocation(
            primary_host="h1",
            bricks=[
                BrickRef(host=h, brick="b0", device="/dev/loop0", capacity=512 * MiB)
                for h in ("h1", "h2")
            ],
        ),
        attachments={"7": ["node1", "node2"]},
    )
    detail = "\n".join(f"line {i}" for i in range(30))
    failed = Status(
        buffer="7",
        host="h1",
        generation=2,
        step="mount",
        attempt=3,
        error=StatusError(category=Kind.ADMIN, message="mount failed", detail=detail),
    )
    text = render.buffer_detail(buffer_detail(buf, {"h1": failed}, names=lambda uid: "alice"))
    assert "owner       alice (uid 1234, gid 4321)" in text
    assert "stage_in    directory /data -> $DW_JOB_STRIPED/in" in text
    assert "attached    job 7 on node1, node2" in text
    assert "state       error, desired created, generation 2" in text
    assert "h1: admin error (generation 2): mount failed" in text
    assert "  line 29" in text and "  line 20" in text and "line 19" not in text
    (h2,) = [line for line in text.splitlines() if line.startswith("h2 ")]
    assert h2.split()[1] == "new"  # no status yet


def test_show_says_when_a_buffer_runs_its_own_lustre_mgs():
    buf = Buffer(
        name="proj",
        owner_uid=0,
        owner_gid=0,
        persistent=True,
        request=BufferRequest(capacity=MiB, pool="lustre"),
        allocation=Allocation(
            primary_host="h1",
            bricks=[BrickRef(host="h1", brick="b0", device="/dev/nvme0n1", capacity=MiB)],
        ),
    )
    d = buffer_detail(buf, {}, names=str)
    assert "primary h1\n" in render.buffer_detail(d) + "\n"
    d["buffer"]["allocation"]["mgs_host"] = "h1"
    assert (
        "allocation  1MiB in 1 brick, primary h1, its own Lustre MGS there"
        in render.buffer_detail(d)
    )


def test_hosts_table_shows_free_over_total_per_pool_and_the_buffers():
    text = render.hosts_table(
        [
            {
                "name": "h1",
                "state": "drained",
                "buffers": ["7", "8", "9", "10", "proj"],
                "pools": {
                    "default": {"bricks": 4, "free": 1, "claimed": 3},
                    "fast": {"bricks": 2, "free": 2, "claimed": 0},
                },
            }
        ]
    )
    header, row = text.splitlines()
    assert header.split()[:2] == ["HOST", "STATE"]
    assert "default 1/4, fast 2/2" in row and row.endswith("5: 7, 8, 9, 10 +1 more")


def test_estimate_says_when_the_pool_is_unknown():
    d = parse_script("#!/bin/sh\n#DW jobdw capacity=1GiB\n")
    text = render.estimate(
        report(d, [], 100 * MiB, Fraction(1, 4), (None, None, "etcd unreachable at http://x"))
    )
    assert "no stage_in lines" in text
    assert (
        "advice: capacity=125MiB (100MiB plus 25% margin = 125MiB; pool unknown (etcd "
        "unreachable at http://x): not rounded to bricks)"
    ) in text
    assert "the script's jobdw capacity=1GiB (allocated as 1GiB): enough" in text
