"""The checks an in-job stage passes before it is recorded (daccore.services.injob): the
buffer side's path, the job's owner, state and node as dac's record and Slurm say, the
credential's origin. Slurm is two scripts standing in for squeue and sinfo."""

from types import SimpleNamespace
from typing import Any

import pytest

from daccore.errors import NotFound, UserError
from daccore.records.models import Buffer, InJobStage, InJobStageStatus, StageState
from daccore.services import injob
from daccore.services.user_requests import Caller, answer, check_args

ROOT = "/mnt/dac"
JOB = "42"
UID, GID = 1234, 4321


def _side(path, access=("striped",), persistent=("ckpt",)):
    return injob.buffer_side(path, "source", ROOT, JOB, list(access), list(persistent), "node1")


@pytest.mark.parametrize(
    "path, want",
    [
        ("/mnt/dac/42/striped", ("42", "striped", "")),
        ("/mnt/dac/42/striped/", ("42", "striped", "")),
        ("/mnt/dac/42/striped/a/./b", ("42", "striped", "a/b")),
        ("/mnt/dac/42/persistent/ckpt/x", ("ckpt", "striped", "x")),
        ("/home/u/x", None),
        ("/home/u/\udcff", None),  # a file name's byte 0xff that is not UTF-8
        ("/mnt/dac2/42/striped", None),
    ],
)
def test_buffer_side_names_the_part_of_the_jobs_own_buffer(path, want):
    assert _side(path) == want


def test_the_private_part_is_the_asking_nodes():
    assert _side("/mnt/dac/42/private/f", access=("striped", "private")) == (
        "42",
        "private/node1",
        "f",
    )


@pytest.mark.parametrize(
    "path, why",
    [
        ("/mnt/dac/43/striped/x", "not in this job's buffer"),
        ("/mnt/dac/42/private/x", "in none of the job's buffers"),
        ("/mnt/dac/42/persistent/other/x", "in none of the job's buffers"),
        ("/mnt/dac/42", "in none of the job's buffers"),
        ("/mnt/dac/42/striped/../../43/striped", "must not hold '..'"),
        ("relative/x", "must be an absolute path"),
        ("/mnt/dac/42/striped/\0", "no NUL"),
        ("/" + "x" * 5000, "at most 4096 bytes"),
        ("/mnt/dac/42/striped/\ud800", "holds a lone surrogate"),  # JSON can carry one
        ("/home/u/\udbff\udfff\ud800", "holds a lone surrogate"),
    ],
)
def test_buffer_side_refuses_every_other_buffer_and_every_trick(path, why):
    with pytest.raises(UserError, match=why):
        _side(path)


# -- the whole check, against a fake store and a fake Slurm ---------------------------------------


def _buffer(owner=UID, state="mounted", nodes=("node1",), access="striped"):
    return Buffer.model_validate(
        {
            "name": JOB,
            "owner_uid": owner,
            "owner_gid": GID,
            "job_id": int(JOB),
            "request": {"capacity": 1 << 30, "pool": "default", "access": access},
            "allocation": {
                "bricks": [
                    {"host": "dac1", "brick": "b0", "device": "/dev/x", "capacity": 1 << 30}
                ],
                "primary_host": "dac1",
            },
            "desired_state": state,
            "attachments": {JOB: list(nodes)} if nodes else {},
        }
    )


class FakeStore:
    def __init__(self, buf):
        self.buf, self.stages, self.cancelled = buf, [], []

    def buffer(self, name):
        return SimpleNamespace(record=self.buf) if self.buf and name == self.buf.name else None

    def add_stage(self, job, host, make, cap):
        if len([1 for _, st in self.stages if st is None]) >= cap:
            raise UserError(f"job {job} has {cap} stages queued or running, its most")
        stage = make(len(self.stages) + 1)
        assert stage.host == host
        self.stages.append((stage, None))
        return stage

    def job_stages(self, job, hosts=None):
        return list(self.stages)

    def cancel_stage(self, stage):
        self.cancelled.append(stage.id)


@pytest.fixture
def slurm(tmp_path):
    """A squeue and sinfo answering from files the test writes (what the service remembers
    of Slurm's answers forgotten first)."""
    injob._SEEN.clear()
    injob._NODES.clear()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("squeue", "sinfo"):
        script = bindir / tool
        script.write_text(f"#!/bin/sh\ncat {tmp_path}/{tool}.out\n")
        script.chmod(0o755)

    def answer_with(squeue="RUNNING|1234|node1", sinfo="node1|127.0.0.1"):
        (tmp_path / "squeue.out").write_text(squeue + "\n")
        (tmp_path / "sinfo.out").write_text(sinfo + "\n")

    answer_with()
    return SimpleNamespace(bindir=str(bindir), answer=answer_with)


def _config(slurm, open_cap=16):
    return SimpleNamespace(
        slurm_bin=slurm.bindir, slurm_conf="", mount_root=ROOT, injob_open=open_cap
    )


def _ask(store, config, verb="stage-start", who=(UID, GID, 1, "127.0.0.1"), **args):
    base = {
        "job": JOB,
        "node": "node1",
        "direction": "out",
        "type": "file",
        "source": "/mnt/dac/42/striped/ckpt.1",
        "destination": "/home/u/ckpt.1",
    }
    if verb != "stage-start":
        base = {"job": JOB}
    return answer(store, config, Caller(*who), verb, {**base, **args})


def test_a_stage_from_the_jobs_node_by_its_owner_is_recorded(slurm):
    store = FakeStore(_buffer())
    got = _ask(store, _config(slurm))
    assert (got["id"], got["state"], got["direction"]) == (1, "queued", "out")
    stage = store.stages[0][0]
    assert (stage.host, stage.part, stage.inner, stage.node) == (
        "dac1",
        "striped",
        "ckpt.1",
        "node1",
    )
    assert (stage.owner_uid, stage.owner_gid) == (UID, GID)


@pytest.mark.parametrize(
    "buf, squeue, sinfo, who, args",
    [
        (_buffer(owner=5678), None, None, None, {}),  # another user's job
        (None, None, None, None, {}),  # no such buffer
        (_buffer(), None, None, None, {"job": "43"}),  # a forged job id
        (_buffer(state="unmounted"), None, None, None, {}),  # the job ended (post_run)
        (_buffer(nodes=()), None, None, None, {}),  # not yet running
        (_buffer(), None, None, None, {"node": "node2"}),  # a node not the job's
        (_buffer(), "COMPLETING|1234|node1", None, None, {}),  # Slurm: no longer running
        (_buffer(), "RUNNING|5678|node1", None, None, {}),  # Slurm: another user's
        (_buffer(), "", None, None, {}),  # Slurm: no such job
    ],
)
def test_anything_but_the_owners_running_job_on_its_node_is_not_found(
    slurm, buf, squeue, sinfo, who, args
):
    slurm.answer(squeue=squeue if squeue is not None else "RUNNING|1234|node1")
    store = FakeStore(buf)
    with pytest.raises(NotFound, match="no running job"):
        _ask(store, _config(slurm), **args)
    assert store.stages == []


def test_a_request_from_another_host_than_the_nodes_is_refused(slurm):
    store = FakeStore(_buffer())
    with pytest.raises(UserError, match="comes from 10.9.9.9, not from node node1"):
        _ask(store, _config(slurm), who=(UID, GID, 1, "10.9.9.9"))
    with pytest.raises(UserError, match="ask from the job's node"):
        _ask(store, _config(slurm), who=(UID, GID, 1, ""))  # no credential: root's own dacctl
    assert store.stages == []


@pytest.mark.parametrize(
    "args, why",
    [
        ({"direction": "in"}, "destination must be in the job's buffer"),
        ({"destination": "/mnt/dac/42/striped/y"}, "destination outside it"),
        ({"source": "/home/u/x"}, "source must be in the job's buffer"),
        ({"destination": "/mnt/dac/43/striped/y"}, "not in this job's buffer"),
        ({"revocable": True}, "only an at_job_end stage may be revocable"),
        ({"when": "later"}, "when must be now or at_job_end"),
        (
            {
                "when": "at_job_end",
                "direction": "in",
                "source": "/home/u/x",
                "destination": "/mnt/dac/42/striped/x",
            },
            "an at_job_end stage goes out of the buffer",
        ),
        ({"type": "list"}, "type file or directory"),
        ({"direction": "sideways"}, "direction must be in or out"),
        ({"source": "/mnt/dac/42/striped/\ud800"}, "source is not a path"),
    ],
)
def test_paths_and_flags_are_checked(slurm, args, why):
    store = FakeStore(_buffer())
    with pytest.raises(UserError, match=why):
        _ask(store, _config(slurm), **args)
    assert store.stages == []


def test_the_jobs_cap_on_open_stages_holds(slurm):
    store = FakeStore(_buffer())
    for _ in range(3):
        _ask(store, _config(slurm, open_cap=3))
    with pytest.raises(UserError, match="3 stages queued or running"):
        _ask(store, _config(slurm, open_cap=3))


def test_only_the_owner_reads_and_cancels_the_jobs_stages(slurm):
    store = FakeStore(_buffer())
    _ask(store, _config(slurm))
    assert [s["id"] for s in _ask(store, _config(slurm), "stage-list")["stages"]] == [1]
    other = (5678, 8765, 1, "127.0.0.1")
    for verb, extra in (
        ("stage-list", {}),
        ("stage-status", {"id": 1}),
        ("stage-cancel", {"id": 1}),
    ):
        with pytest.raises(NotFound):
            _ask(store, _config(slurm), verb, who=other, **extra)
    assert store.cancelled == []
    _ask(store, _config(slurm), "stage-cancel", id=1)
    assert store.cancelled == [1]


def test_wait_returns_once_every_stage_is_final(slurm):
    store = FakeStore(_buffer())
    _ask(store, _config(slurm))
    got = _ask(store, _config(slurm), "stage-wait", timeout=0)
    assert got["done"] is False
    stage = store.stages[0][0]
    store.stages[0] = (stage, InJobStageStatus(id=1, job=JOB, host="dac1", state=StageState.DONE))
    got = _ask(store, _config(slurm), "stage-wait", ids=[1], timeout=5)
    assert (got["done"], got["stages"][0]["state"]) == (True, "done")
    with pytest.raises(NotFound, match="no stage 9"):
        _ask(store, _config(slurm), "stage-wait", ids=[9], timeout=0)


def test_the_record_refuses_a_list_and_an_escaping_inner_path():
    base = dict(
        id=1,
        job=JOB,
        buffer=JOB,
        host="dac1",
        owner_uid=UID,
        owner_gid=GID,
        direction="out",
        type="file",
        source="/a",
        destination="/b",
        part="striped",
        inner="x",
        node="node1",
    )
    InJobStage(**base)
    for bad in ({"type": "list"}, {"inner": "../x"}, {"inner": "/x"}, {"part": "private/../x"}):
        with pytest.raises(ValueError):
            InJobStage(**{**base, **bad})


def test_check_args_takes_the_stage_verbs():
    assert check_args("stage-status", {"job": "42", "id": 3}) == {"job": "42", "id": 3}
    with pytest.raises(UserError, match="'job' is not a valid name"):
        check_args("stage-list", {"job": "../x"})


def test_a_running_job_is_asked_of_slurm_again_only_after_a_few_seconds(slurm, monkeypatch):
    store = FakeStore(_buffer())
    _ask(store, _config(slurm))
    slurm.answer(squeue="COMPLETING|1234|node1")  # Slurm moved on; the record has not yet
    _ask(store, _config(slurm))  # within SLURM_FRESH: the RUNNING answer stands
    monkeypatch.setattr(injob, "SLURM_FRESH", 0.0)
    with pytest.raises(NotFound, match="no running job"):
        _ask(store, _config(slurm))
    store.buf = _buffer(state="unmounted")  # post_run: refused at once, whatever Slurm said
    monkeypatch.setattr(injob, "SLURM_FRESH", 60.0)
    with pytest.raises(NotFound, match="no running job"):
        _ask(store, _config(slurm))


def test_a_running_job_is_asked_of_slurm_again_in_the_background_before_its_answer_expires(
    slurm, monkeypatch
):
    """Past SLURM_AHEAD of SLURM_FRESH the request is answered from the answer it has while
    squeue is asked again beside it; the new answer stands for the next request. An answer
    past SLURM_FRESH is never used: that request waits for squeue."""
    import threading
    import time

    store = FakeStore(_buffer())
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    _ask(store, _config(slurm))
    slurm.answer(squeue="COMPLETING|1234|node1")
    clock[0] += injob.SLURM_FRESH * injob.SLURM_AHEAD + 1
    _ask(store, _config(slurm))  # answered at once from the RUNNING answer...
    for t in threading.enumerate():  # ...while squeue is asked again
        if t.name == "squeue":
            t.join(10)
    assert JOB not in injob._SEEN and not injob._REFRESHING
    with pytest.raises(NotFound, match="no running job"):
        _ask(store, _config(slurm))  # the new answer stands
    slurm.answer()
    _ask(store, _config(slurm))
    slurm.answer(squeue="COMPLETING|1234|node1")
    clock[0] += injob.SLURM_FRESH + 1  # too old to be used at all: asked for at once
    with pytest.raises(NotFound, match="no running job"):
        _ask(store, _config(slurm))


def test_bbstats_line_counts_the_stages_and_shows_the_running_ones_progress():
    from daccore.records.status_view import stages_text

    progress = {
        "bytes_done": 1 << 29,
        "bytes_total": 1 << 30,
        "files_done": 0,
        "files_total": 1,
        "rate": 1 << 28,
        "eta": 2.0,
    }
    stages: list[tuple[dict[str, Any], dict[str, Any] | None]] = [
        ({"id": 1}, {"state": "done"}),
        ({"id": 2}, {"state": "running", "progress": progress}),
        ({"id": 3}, None),
        ({"id": 4}, {"state": "failed", "error": {"message": "stage out failed: /d: \x1b[2J"}}),
        ({"id": 5}, {"state": "revoked"}),
    ]
    assert stages_text(stages) == (
        "in-job stages: 1 done, 1 running (512MiB/1GiB 50% 0/1 files at 256MiB/s, 2s "
        "left), 1 queued, 1 failed: stage out failed: /d: \\x1b[2J, 1 revoked"
    )
    assert stages_text(stages, errors=False).endswith("1 failed, 1 revoked")
    assert stages_text([]) == ""
