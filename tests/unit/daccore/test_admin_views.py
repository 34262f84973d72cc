import json

import pytest

from daccore.errors import Kind, NotFound
from daccore.records.models import (
    Allocation,
    BrickRef,
    Buffer,
    BufferRequest,
    State,
    Status,
    StatusError,
)
from daccore.rules.inventory import Inventory
from daccore.services.admin_views import (
    age,
    buffer_detail,
    buffer_rows,
    buffer_state,
    host_rows,
    resolve_uid,
    shorten,
    sort_names,
    visible,
)

MiB = 1 << 20


def buffer(
    name="7",
    owner=1234,
    hosts=("h1",),
    generation=1,
    pool="default",
    job=7,
    created_at=1000.0,
    desired=State.CREATED,
):
    return Buffer(
        name=name,
        owner_uid=owner,
        owner_gid=4321,
        job_id=job,
        persistent=job is None,
        generation=generation,
        created_at=created_at,
        desired_state=desired,
        request=BufferRequest(capacity=512 * MiB, pool=pool),
        allocation=Allocation(
            primary_host=hosts[0],
            bricks=[
                BrickRef(host=h, brick="b0", device="/dev/loop0", capacity=512 * MiB) for h in hosts
            ],
        ),
    )


def status(host, state=None, generation=1, error=None, buffer_name="7"):
    return Status(
        buffer=buffer_name,
        host=host,
        state=state,
        generation=generation,
        error=StatusError(category=Kind.ADMIN, message=error, detail="x\ny") if error else None,
    )


def test_buffer_state_is_the_lowest_state_its_hosts_reached():
    buf = buffer(hosts=("h1", "h2"))
    assert (
        buffer_state(buf, {"h1": status("h1", State.MOUNTED), "h2": status("h2", State.STAGED_IN)})
        == "staged_in"
    )


def test_buffer_state_is_new_until_every_host_reported():
    buf = buffer(hosts=("h1", "h2"))
    assert buffer_state(buf, {}) == "new"
    assert buffer_state(buf, {"h1": status("h1", State.CREATED)}) == "new"
    assert buffer_state(buf, {"h1": status("h1", State.CREATED), "h2": status("h2")}) == "new"


def test_buffer_state_is_error_only_for_a_failure_at_the_current_generation():
    buf = buffer(hosts=("h1", "h2"), generation=3)
    failed_now = {
        "h1": status("h1", State.CREATED, 3, "mount failed"),
        "h2": status("h2", State.MOUNTED, 3),
    }
    assert buffer_state(buf, failed_now) == "error"
    retried = {
        "h1": status("h1", State.CREATED, 2, "mount failed"),
        "h2": status("h2", State.MOUNTED, 3),
    }
    assert buffer_state(buf, retried) == "created"


def test_users_see_their_own_buffers_and_root_sees_every_one():
    mine, theirs = buffer("7", owner=1234), buffer("8", owner=999)
    assert visible(1234, mine) and not visible(1234, theirs) and visible(0, theirs)
    read = []

    def statuses(name):
        read.append(name)
        return {}

    assert [r["name"] for r in buffer_rows([mine, theirs], statuses, 1234)] == ["7"]
    assert read == ["7"]  # another user's statuses are not even read
    assert [r["name"] for r in buffer_rows([theirs, mine], lambda n: {}, 0)] == ["7", "8"]


def test_buffer_rows_filter_by_owner_state_and_pool():
    bufs = [
        buffer("7", owner=1234),
        buffer("8", owner=999, pool="fast"),
        buffer("proj", owner=999, job=None),
    ]
    states = {"7": {"h1": status("h1", State.MOUNTED)}, "8": {}, "proj": {}}

    def names(rows):
        return [r["name"] for r in rows]

    assert names(buffer_rows(bufs, states.__getitem__, 0, owner_uid=999)) == ["8", "proj"]
    assert names(buffer_rows(bufs, states.__getitem__, 0, state="mounted")) == ["7"]
    assert names(buffer_rows(bufs, states.__getitem__, 0, state="new", pool="default")) == ["proj"]
    assert names(buffer_rows(bufs, states.__getitem__, 1234, owner_uid=999)) == []


def test_a_buffer_row_names_its_owner_and_age():
    (row,) = buffer_rows(
        [buffer(owner=1234, created_at=1000.0)],
        lambda n: {},
        0,
        now=1090.0,
        names={1234: "alice"}.__getitem__,
    )
    assert row["owner"] == "alice" and row["owner_uid"] == 1234 and row["age_seconds"] == 90
    assert row["size"] == 512 * MiB and row["hosts"] == ["h1"] and row["job"] == 7
    json.dumps(row)  # the --json form


def test_job_buffers_sort_numerically_before_persistent_ones():
    assert sort_names(["10", "proj", "9", "alpha"]) == ["9", "10", "alpha", "proj"]


@pytest.mark.parametrize(
    "seconds,text",
    [(0, "0s"), (59.9, "59s"), (60, "1m"), (7200, "2h"), (3 * 86400 + 5, "3d"), (-4, "0s")],
)
def test_age_is_the_largest_whole_unit(seconds, text):
    assert age(seconds) == text


def test_shorten_names_at_most_a_few_then_counts_the_rest():
    assert shorten([]) == "-"
    assert shorten(["7", "8"]) == "7, 8"
    assert shorten([str(i) for i in range(7)]) == "0, 1, 2, 3 +3 more"


def test_resolve_uid_takes_a_name_or_a_number():
    assert resolve_uid("root") == 0 and resolve_uid("1234") == 1234
    with pytest.raises(NotFound, match="no user named 'no-such-user'"):
        resolve_uid("no-such-user")


def test_host_rows_show_state_free_bricks_per_pool_and_the_buffers_on_each_host():
    pools = [json.dumps({"name": p, "granularity": 10}).encode() for p in ("default", "fast")]

    def host(name, bricks, drained=False):
        return json.dumps(
            {
                "name": name,
                "drained": drained,
                "bricks": [
                    {"name": b, "device": f"/dev/{b}", "capacity": 10, "pool": p} for b, p in bricks
                ],
            }
        ).encode()

    inv = Inventory.from_json(
        pools,
        alive={"up", "dr"},
        claims={
            ("default", "up", "b0"): "7",
            ("fast", "up", "b2"): "proj",
            ("default", "dr", "b0"): "12",
            ("default", "down", "b0"): "9",
        },
        hosts=[
            host("up", [("b0", "default"), ("b1", "default"), ("b2", "fast")]),
            host("dr", [("b0", "default")], drained=True),
            host("down", [("b0", "default"), ("b1", "default")], drained=True),
        ],
    )
    rows = {r["name"]: r for r in host_rows(inv)}
    assert [r["name"] for r in host_rows(inv)] == ["down", "dr", "up"]
    assert rows["up"]["state"] == "up" and rows["up"]["buffers"] == ["7", "proj"]
    assert rows["up"]["pools"] == {
        "default": {"bricks": 2, "free": 1, "claimed": 1},
        "fast": {"bricks": 1, "free": 0, "claimed": 1},
    }
    assert rows["dr"]["state"] == "drained" and rows["dr"]["buffers"] == ["12"]
    assert rows["down"]["state"] == "down,drained" and not rows["down"]["alive"]
    assert rows["down"]["pools"]["default"]["free"] == 1


def test_buffer_detail_has_the_spec_and_a_status_per_host_even_before_it_reports():
    buf = buffer(hosts=("h1", "h2"), generation=2)
    d = buffer_detail(buf, {"h1": status("h1", State.CREATED, 2, "boom")}, now=1010.0, names=str)
    assert d["buffer"]["name"] == "7" and d["buffer"]["generation"] == 2
    assert d["state"] == "error" and d["owner"] == "1234" and d["age_seconds"] == 10
    assert d["statuses"]["h2"] is None
    assert d["statuses"]["h1"]["error"] == {
        "category": "admin",
        "message": "boom",
        "detail": "x\ny",
    }
    json.dumps(d)
