"""In-job stages' records on a real etcd (daccore.store.injob): ids unique and the job's cap
on open stages kept when requests race; statuses written only while their request stands."""

import threading

import pytest

from daccore.errors import Conflict, UserError
from daccore.records.models import InJobStage, InJobStageStatus, StageState


def _make(job="42", host="h1"):
    def make(id):
        return InJobStage(
            id=id,
            job=job,
            buffer=job,
            host=host,
            owner_uid=1234,
            owner_gid=4321,
            direction="out",
            type="file",
            source=f"/mnt/dac/{job}/striped/c{id}",
            destination=f"/home/u/c{id}",
            part="striped",
            inner=f"c{id}",
            node="node1",
        )

    return make


def test_forty_parallel_requests_get_unique_ids_and_never_pass_the_cap(store):
    got, refused, errors = [], [], []

    def one(i):
        try:
            got.append(
                store.add_stage(
                    "42", "h1" if i % 2 else "h2", _make(host="h1" if i % 2 else "h2"), 16
                ).id
            )
        except UserError as e:
            refused.append(str(e))
        except Exception as e:  # noqa: BLE001 - any other failure fails the test below
            errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert sorted(got) == list(range(1, 17)) and len(refused) == 24
    stages = store.job_stages("42")
    assert [s.id for s, _ in stages] == list(range(1, 17))
    assert sorted(store.stage_hosts("42")) == ["h1", "h2"]


def test_a_final_stage_frees_its_place_and_a_status_needs_its_request(store):
    for _ in range(2):
        store.add_stage("7", "h1", _make("7"), 2)
    with pytest.raises(UserError, match="2 stages queued or running"):
        store.add_stage("7", "h1", _make("7"), 2)
    (_, _, incarnation) = store.host_stage_texts("h1")[0][0]
    store.put_stage_status(
        InJobStageStatus(id=1, job="7", host="h1", state=StageState.DONE), incarnation
    )
    assert store.add_stage("7", "h1", _make("7"), 2).id == 3
    store.cancel_stage(store.job_stages("7")[1][0])
    assert store.job_stages("7")[1][0].cancel is True
    store.drop_job_stages("h1", "7")
    assert store.job_stages("7", ["h1"]) == [] and store.stage_hosts("7") == []
    with pytest.raises(Conflict, match="is gone"):
        store.put_stage_status(InJobStageStatus(id=1, job="7", host="h1"), incarnation)


def test_the_lean_read_gives_each_stage_with_its_status_as_json(store):
    for _ in range(2):
        store.add_stage("9", "h1", _make("9"), 4)
    (_, _, incarnation) = store.host_stage_texts("h1")[0][0]
    store.put_stage_status(
        InJobStageStatus(id=1, job="9", host="h1", state=StageState.RUNNING), incarnation
    )
    docs = store.job_stage_docs("9")
    assert [(r["id"], s and s["state"]) for r, s in docs] == [(1, "running"), (2, None)]
    assert store.job_stage_docs("nojob") == []
