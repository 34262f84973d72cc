"""The one rule of whether a buffer failed (daccore.records.buffer_doc.failed): an error at
the spec's current generation fails it, one under an older generation (being retried, or
outgrown) does not; every view says the same."""

import pytest

from daccore.errors import Kind
from daccore.records import buffer_doc, status_view
from daccore.records.models import (
    Allocation,
    BrickRef,
    Buffer,
    BufferRequest,
    State,
    Status,
    StatusError,
)
from daccore.services import admin_views, bbstat, dws, jobs

MiB = 1 << 20
ERROR = {"category": "admin", "message": "mount failed", "detail": ""}


def test_an_error_at_the_current_generation_fails_the_buffer():
    assert buffer_doc.failed({"state": "created", "generation": 3, "error": ERROR}, 3)
    # read against an older spec than the host answered: still the newest news
    assert buffer_doc.failed({"generation": 4, "error": ERROR}, 3)


def test_an_error_under_an_older_generation_does_not():
    assert not buffer_doc.failed({"state": "created", "generation": 2, "error": ERROR}, 3)
    assert not buffer_doc.failed({"error": ERROR}, 1)  # a status answers generation 0 at first
    assert not buffer_doc.failed({"state": "created", "generation": 3, "error": None}, 3)
    assert not buffer_doc.failed(None, 3)


def test_the_state_is_error_new_or_the_lowest_reached():
    hosts = ["h1", "h2"]
    created, mounted = {"state": "created", "generation": 3}, {"state": "mounted", "generation": 3}
    assert buffer_doc.state(hosts, {"h1": mounted, "h2": created}, 3) == "created"
    assert buffer_doc.state(hosts, {"h1": mounted}, 3) == "new"
    assert buffer_doc.state(hosts, {"h1": mounted, "h2": {**created, "error": ERROR}}, 3) == "error"
    retried = {**created, "generation": 2, "error": ERROR}
    assert buffer_doc.state(hosts, {"h1": mounted, "h2": retried}, 3) == "created"
    assert set(buffer_doc.STATES) == {"new", "error"} | {s.value for s in State}


def _buffer(generation):
    return Buffer(
        name="proj",
        owner_uid=1234,
        owner_gid=4321,
        persistent=True,
        generation=generation,
        desired_state=State.CREATED,
        request=BufferRequest(capacity=1024 * MiB, pool="default"),
        allocation=Allocation(
            primary_host="h1",
            bricks=[
                BrickRef(host=h, brick="b0", device="/dev/loop0", capacity=512 * MiB)
                for h in ("h1", "h2")
            ],
        ),
    )


@pytest.mark.parametrize("answered, failed", [(3, True), (2, False)])
def test_every_view_says_the_same(answered, failed):
    buf = _buffer(3)
    statuses = {
        "h1": Status(buffer="proj", host="h1", state=State.CREATED, generation=3),
        "h2": Status(
            buffer="proj",
            host="h2",
            state=State.CREATED,
            generation=answered,
            error=StatusError(category=Kind.ADMIN, message="mkfs failed"),
        ),
    }
    doc = buf.model_dump(mode="json")
    docs = {h: s.model_dump(mode="json") for h, s in statuses.items()}
    word = "error" if failed else "created"
    v = status_view.view(buf, statuses)
    assert admin_views.buffer_state(buf, statuses) == word
    assert admin_views.buffer_detail(buf, statuses)["state"] == word
    assert v["state"] == buffer_doc.status_view(doc, docs)["state"] == word
    assert ("failed: mkfs failed" in status_view.summary_line(v)) is failed
    (session,) = dws.sessions({"proj": doc}, {"proj": docs})
    assert (session.state[2] == "F") is failed
    assert dws.state_flags("created", list(docs.values()), 3) == ("CAF--" if failed else "CA---")
    assert ("failed (its owner sees why" in bbstat.public_line(v)) is failed


def test_a_view_from_before_generations_counts_every_error():
    # a user service older than this dacctl answers `dacctl status` without them
    v = {
        "buffer": "7",
        "desired_state": "created",
        "hosts": [{"host": "h1", "state": "created", "step": "", "progress": None, "error": ERROR}],
    }
    assert status_view.summary_line(v) == "buffer 7: created, failed: mount failed"


def test_a_teardown_failing_counts_across_its_retries():
    held = jobs._teardown_failed
    failed_delete = {"step": "delete", "attempt": 1, "generation": 5, "error": ERROR}
    assert held(failed_delete, 5)
    # Slurm's retry is a newer spec; dacd runs the delete again, its status without the error
    assert held(failed_delete, 6)
    assert held({"step": "delete", "attempt": 2, "generation": 6, "error": None}, 6)
    # the retry in flight records its task with the step (what CI's loaded runs caught)
    running = {"step": "delete: unmount and wipe the filesystem", "attempt": 2, "error": None}
    assert held({**running, "generation": 6}, 6)
    assert not held({"step": "delete", "attempt": 1, "generation": 6, "error": None}, 6)
    # a stage's failure the teardown outgrew is no failed teardown; one at the teardown's
    # own spec (dacd refusing it) is
    assert not held({"step": "stage_out", "attempt": 1, "generation": 4, "error": ERROR}, 6)
    assert held({"step": "stage_out", "attempt": 1, "generation": 6, "error": ERROR}, 6)
