"""dac's answerer (issue 34) under a real slurmctld, burst_buffer/lua: the hooks slurmctld runs
itself (job_process, pools, paths) answered over its socket in-process by burst_buffer.lua,
not by forked dacctl, on 22.05, 24.11 and 26.05; the answerer killed and started again during
a storm of submissions, every job accepted (forks meanwhile) and run; and the same Slurm
without an answerer, where every hook forks dacctl (the fallback's own path)."""

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from daclocal.cluster import LocalState, restart_answerer
from dacservice.answerer.wire import ask

JOB = """#!/bin/bash
#SBATCH -o @JOBS@/out-%j.txt
#DW jobdw capacity=512MiB access_mode=striped type=scratch pool=default
echo "buffer $DW_JOB_STRIPED"
"""
HOT = ("job_process", "pools", "paths")
FORKED = "forking dacctl"  # burst_buffer.lua's log line when it falls back (not on ENOENT)


def _socket(slurm) -> Path:
    return Path(slurm.workdir) / "slurm" / "answerer" / "socket"


def _stats(slurm) -> dict:
    kind, rc, body, _ = ask(str(_socket(slurm)), "stats", [])
    assert (kind, rc) == ("ANSWER", 0), body
    return json.loads(body)


def _answered(before: dict, after: dict, function: str) -> int:
    return sum(
        after.get(f"{function}:{s}", 0) - before.get(f"{function}:{s}", 0)
        for s in ("mirror", "etcd", "kept")  # kept: a valid job_process given again
    )


def _ran(slurm, job_id: str) -> None:
    job = slurm.wait(job_id, timeout=180)
    assert job["JobState"] == "COMPLETED", (job, slurm.logs())
    with open(f"{slurm.jobs}/out-{job_id}.txt") as f:  # paths' answer, as the job saw it
        assert f.read().strip() == f"buffer {slurm.workdir}/mnt/{job_id}/striped"


@pytest.mark.every_release
@pytest.mark.lua_only
def test_the_hooks_inside_slurmctld_are_answered_by_the_answerer_not_by_forks(slurm):
    before, log_before = _stats(slurm), slurm._slurmctld_log().count(FORKED)
    ids = []
    for _ in range(3):
        job_id, r = slurm.sbatch(JOB)
        assert job_id, r.stderr
        ids.append(job_id)
    refused = slurm.sbatch("#!/bin/bash\n#DW jobdw capacity=1GiB pool=default acces=striped\n")
    assert refused[0] is None and "unknown key 'acces'" in refused[1].stderr
    for job_id in ids:
        _ran(slurm, job_id)
    after = _stats(slurm)
    # the first sbatch's job_process and the refused one's came over the socket (the next two,
    # the same script, may read the valid file the answerer then keeps); each start's paths
    # from the job's paths file the answerer keeps beside it (dacservice/answerer/published.py: one
    # written for each buffer), else over the socket (the pools file not believed a moment);
    # pools since slurmctld started (at its start, and every 30 s), over the socket or from the
    # pools file; no fork logged, and each job saw its own path
    assert _answered(before, after, "job_process") >= 2, (before, after)
    written = after.get("paths:files", 0) - before.get("paths:files", 0)
    assert written >= 3, (before, after)
    assert _answered(before, after, "paths") < 3, (before, after)  # a file read, at least
    assert _answered({}, after, "pools") + after.get("pools:file", 0) >= 1, after
    assert not any(after.get(f"{f}:refused", 0) for f in HOT), after
    assert slurm._slurmctld_log().count(FORKED) == log_before, slurm.logs()


@pytest.mark.lua_only
def test_the_answerer_killed_and_restarted_under_50_submissions_loses_no_job(slurm):
    # 50 held jobs (each through job_process, none holding capacity): every one accepted and
    # known to Slurm with its buffer request; five of them released and run, the rest cancelled
    workdir = Path(slurm.workdir)
    state = LocalState.load(workdir)
    assert state is not None and state.slurm.get("answerer"), state
    pid = state.slurm["pids"]["answerer"]
    log_before = slurm._slurmctld_log().count(FORKED)
    held = JOB.replace("#SBATCH -o", "#SBATCH --hold\n#SBATCH -o")
    submitted: list[float] = []

    def submit(i):
        submitted.append(time.monotonic())
        # each its own script: none is answered from a valid file a killed answerer left
        # (believed for up to 2 s), so the calls while none listens fork
        return slurm.sbatch(f"{held}# submission {i}\n")

    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(submit, i) for i in range(50)]
        while len(submitted) < 12:
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)  # as a crash: its socket file stays, refusing connections
        time.sleep(1.0)
        new_pid = restart_answerer(workdir)
        results = [f.result() for f in futures]
    assert new_pid != pid
    ids = [job_id for job_id, _ in results]
    assert all(ids), [r.stderr for job_id, r in results if not job_id]
    assert len(set(ids)) == 50
    for job_id in ids:
        job = slurm.job(job_id)
        assert job.get("JobState") == "PENDING" and "capacity=512MiB" in slurm.scontrol(
            "show", "job", job_id
        ), job
    # the fork answered while no answerer listened; the new one answered after
    assert slurm._slurmctld_log().count(FORKED) > log_before, slurm.logs()
    assert _answered({}, _stats(slurm), "job_process") >= 1
    state = LocalState.load(workdir)
    assert state is not None and state.slurm["pids"]["answerer"] == new_pid
    slurm.scontrol("release", ",".join(ids[:5]))
    slurm._run(["scancel", *ids[5:]])
    for job_id in ids[:5]:
        _ran(slurm, job_id)
    for job_id in ids[5:]:
        assert slurm.wait(job_id, timeout=120)["JobState"] == "CANCELLED"


def test_without_the_answerer_every_hook_forks_dacctl_and_the_job_runs(slurm_forked):
    slurm = slurm_forked
    state = LocalState.load(Path(slurm.workdir))
    assert state is not None
    assert "answerer" not in state.slurm["pids"], state.slurm
    env_file = Path(slurm.workdir) / "slurm" / "etc" / "burst_buffer.env"
    assert "DAC_ANSWERER_SOCKET=none\n" in env_file.read_text()
    job_id, r = slurm.sbatch(JOB)
    assert job_id, r.stderr
    _ran(slurm, job_id)
    refused = slurm.sbatch("#!/bin/bash\n#DW jobdw capacity=1GiB pool=default acces=striped\n")
    assert refused[0] is None and "unknown key 'acces'" in refused[1].stderr
    assert not _socket(slurm).exists()
