"""daccore.records.buffer_doc (the JSON readers' derived values) against daccore.records.models (the
model's): the same answers for the same buffer, so neither can drift from the other."""

import grp
import os

from daccore.errors import Kind
from daccore.records import buffer_doc, status_view
from daccore.records.models import (
    Allocation,
    BrickRef,
    Buffer,
    BufferRequest,
    Progress,
    State,
    Status,
    StatusError,
)
from daccore.rules.rights import groups_of, rights

MiB = 1 << 20


def _buffer(hosts=("h2", "h1", "h2"), job=7):
    return Buffer(
        name=str(job) if job else "proj",
        owner_uid=1234,
        owner_gid=4321,
        job_id=job,
        persistent=job is None,
        generation=2,
        created_at=1000.0,
        desired_state=State.MOUNTED,
        request=BufferRequest(capacity=1024 * MiB, pool="default"),
        allocation=Allocation(
            primary_host=hosts[0],
            bricks=[
                BrickRef(
                    host=h, brick=f"b{i}", device=f"/dev/loop{i}", capacity=(i + 1) * 256 * MiB
                )
                for i, h in enumerate(hosts)
            ],
        ),
    )


def _statuses():
    return {
        "h1": Status(
            buffer="7",
            host="h1",
            state=State.STAGED_IN,
            generation=2,
            step="mount",
            progress=Progress(bytes_done=5, bytes_total=10, files_done=1, files_total=2),
        ),
        "h2": Status(
            buffer="7",
            host="h2",
            state=State.CREATED,
            generation=2,
            error=StatusError(category=Kind.USER, message="no", detail="d"),
        ),
    }


def test_hosts_and_size_are_the_models():
    for buf in (_buffer(), _buffer(hosts=("h1",), job=None)):
        doc = buf.model_dump(mode="json")
        assert buffer_doc.hosts(doc) == buf.allocation.hosts
        assert buffer_doc.size(doc) == buf.allocation.size


def test_the_status_view_of_the_json_is_the_models():
    buf, statuses = _buffer(), _statuses()
    from_json = buffer_doc.status_view(
        buf.model_dump(mode="json"), {h: s.model_dump(mode="json") for h, s in statuses.items()}
    )
    assert status_view.view(buf, statuses) == from_json
    assert from_json["size"] == buf.allocation.size and from_json["job"] == 7
    assert [h["host"] for h in from_json["hosts"]] == ["h1", "h2"]
    assert from_json["hosts"][0]["progress"]["bytes_done"] == 5
    assert from_json["hosts"][1]["error"]["message"] == "no"
    # a host that has written nothing yet
    assert buffer_doc.status_view(buf.model_dump(mode="json"), {})["hosts"][0] == {
        "host": "h1",
        "state": None,
        "step": "",
        "progress": None,
        "error": None,
        "generation": 0,
    }


def test_rights_root_and_the_admin_group_act_as_root_others_as_themselves():
    root_group = grp.getgrgid(0).gr_name
    assert rights(0, [], "") == 0
    assert rights(1234, [4321], "") == 1234
    assert rights(1234, [4321, 0], root_group) == 0
    assert rights(1234, [4321], root_group) == 1234
    assert rights(1234, [0], "no-such-group-here") == 1234
    assert groups_of(0, 0) == os.getgrouplist("root", 0)
    assert groups_of(987654, 4321) == [4321]  # unknown to passwd: its gid alone
