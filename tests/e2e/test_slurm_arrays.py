"""Job arrays of burst-buffer jobs through a real Slurm, both plugins, every release: each task
gets its own buffer, stages in, runs, stages out and tears down; a cancelled array leaves no
buffer behind and no teardown going on. The staged array is written as Slurm's own test35.3
and older sites' scripts write it (a key repeated with its value, a list stage_in without
destination=).

What Slurm does with a task's job script differs by release (daccore/services/slurm_args.py):
22.05 hard-links the array's script into each task's job directory; 24.11 and later never make
that directory, and dac links the script there itself. A `%a` in a directive (the task's index)
makes Slurm hand setup and the stages a memfd of the replaced script instead, and paths still
the task's job directory."""

import json
import os
import pwd

import pytest
from clitools import pools, run, wait_for

from daclocal.slurm import SUBMIT_USER

# As Slurm's test35.3 and older sites' scripts write it: `type=scratch` twice on the jobdw line
# (test35.2, 35.3, 35.6), and a list stage_in whose lines name their own destinations
# (data-acc's and NERSC's scripts)
ARRAY_JOB = """#!/bin/bash
#SBATCH -N 1
#SBATCH --array=1-2
#SBATCH -o @JOBS@/arr-%A_%a.txt
#DW jobdw type=scratch capacity=64MiB access_mode=striped type=scratch pool=default
#DW stage_in type=list source=@JOBS@/arr-list-@TAG@
#DW stage_out type=directory source=$DW_JOB_STRIPED/out destination=@JOBS@/arr-out-@TAG@-%a
mkdir "$DW_JOB_STRIPED/out"
echo "$SLURM_ARRAY_TASK_ID $(tr a-z A-Z < "$DW_JOB_STRIPED/in")" > "$DW_JOB_STRIPED/out/result"
"""


def _free_bricks(slurm) -> int:
    return pools(slurm.env)["default"]["free_bricks"]


def _no_buffer_left(slurm, job_ids, free: int) -> None:
    """None of the jobs' buffers in dac's records, and as many bricks free as before them."""
    wait_for(lambda: _free_bricks(slurm) == free, 60, f"{free} bricks free again")
    out = run("dacctl", "--function", "show_instances", env=slurm.env).stdout
    assert not {i["id"] for i in json.loads(out)["instances"]} & set(job_ids), out


@pytest.mark.every_release
def test_each_task_of_a_job_array_stages_runs_and_tears_down_its_own_buffer(slurm):
    user = pwd.getpwnam(SUBMIT_USER)
    tag = f"{slurm.release}-{slurm.plugin}"
    src, listing = (os.path.join(slurm.jobs, f"arr-{name}-{tag}") for name in ("in", "list"))
    for path, text in ((src, "staged in\n"), (listing, f"{src} $DW_JOB_STRIPED/in\n")):
        with open(path, "w") as f:
            f.write(text)
        os.chown(path, user.pw_uid, user.pw_gid)
    free = _free_bricks(slurm)
    array_id, r = slurm.sbatch(ARRAY_JOB.replace("@TAG@", tag))
    assert array_id, r.stderr
    ids = []
    for task in ("1", "2"):
        job = slurm.wait(f"{array_id}_{task}", timeout=120)
        assert (job["JobState"], job["BurstBufferState"]) == ("COMPLETED", "complete"), job
        ids.append(job["JobId"])
        path = os.path.join(slurm.jobs, f"arr-out-{tag}-{task}", "result")
        with open(path) as f:
            assert f.read() == f"{task} STAGED IN\n"
        assert os.stat(path).st_uid == user.pw_uid
    assert len(set(ids)) == 2, ids  # a buffer each, named after each task's own job id
    _no_buffer_left(slurm, ids, free)


CANCELLED_ARRAY = """#!/bin/bash
#SBATCH -N 1
#SBATCH --exclusive
#SBATCH --array=1-3
#SBATCH -o /dev/null
#DW jobdw capacity=64MiB access_mode=striped type=scratch pool=default
sleep 600
"""


@pytest.mark.every_release
def test_a_cancelled_job_array_leaves_no_buffer_and_no_teardown_going_on(slurm):
    """Two tasks run (one per node), the third waits for a node: the cancel meets buffers
    mounted on nodes and one only set up."""
    free = _free_bricks(slurm)
    array_id, r = slurm.sbatch(CANCELLED_ARRAY)
    assert array_id, r.stderr

    def two_running():
        out = slurm._run(["squeue", "-h", "-r", "-o", "%i %A %T", "-j", array_id]).stdout
        return out if out.count("RUNNING") == 2 else None

    tasks = [
        line.split()[:2] for line in wait_for(two_running, 120, "two tasks running").splitlines()
    ]
    assert len(tasks) == 3, tasks
    slurm._run(["scancel", array_id])
    for task, job_id in tasks:
        # BurstBufferState complete: the teardown succeeded (a failing one is retried by
        # Slurm, every ~5 s for good under datawarp, and shows teardown or teardown-fail)
        job = slurm.wait(task, timeout=120, remedy_race=True, log_id=job_id)
        assert job["JobState"] == "CANCELLED", job
    _no_buffer_left(slurm, [job_id for _, job_id in tasks], free)
