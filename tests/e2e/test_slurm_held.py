"""A job held by a failed stage-in keeps no pool capacity (issue 30). Without
burst_buffer.conf's `Flags=TeardownFailure`, Slurm (both plugins; measured on 22.05, 24.11 and
26.05 by their source) holds such a job with its allocation (`scontrol show burst`: `JobID=N
... State=allocated`, the pool's UsedSpace) and dac's buffer in place until it is cancelled,
and the next job waits on BurstBufferResources; the local DAC sets the flag as the shipped
burst_buffer.conf does, and Slurm tears the held job's buffer down at once (docs/slurm.md, "A
job held by a failed setup or stage-in", with the figures)."""

import os
import pwd
import re
import time
from pathlib import Path

import pytest
from clitools import pools, run, wait_for

from daclocal.slurm import SUBMIT_USER

#: 2 GiB: the whole of a host (4 x 512 MiB), so with the other host drained the pool holds
#: one such buffer at a time
HELD = """#!/bin/bash
#SBATCH -o @JOBS@/out-%j.txt
#DW jobdw capacity=2GiB access_mode=striped type=scratch pool=default
#DW stage_in type=file source=@JOBS@/held-in destination=$DW_JOB_STRIPED/in
cat "$DW_JOB_STRIPED/in"
"""
NEXT = """#!/bin/bash
#SBATCH -o @JOBS@/out-%j.txt
#DW jobdw capacity=2GiB access_mode=striped type=scratch pool=default
echo next ran
"""
#: from the hold: Slurm's teardown (hurry) done and its record gone, every brick free
RELEASED_WITHIN = 30.0
#: from the release: Slurm sees the pool's bricks free again at its next pools call (lua
#: every 30 s, datawarp's state load every 30 s too) and starts the next job
NEXT_WITHIN = 90.0


def allocation(slurm, job_id: str) -> list[str]:
    """What `scontrol show burst` sets aside for `job_id`: its allocation line, and every
    pool's UsedSpace other than 0 (the held job is the only one with a buffer here)."""
    out = slurm.scontrol("show", "burst")
    return [line.strip() for line in out.splitlines() if f"JobID={job_id} " in line] + [
        f"UsedSpace={u}" for u in re.findall(r"UsedSpace=(\S+)", out) if u != "0"
    ]


@pytest.mark.every_release
def test_a_job_held_by_a_failed_stage_in_frees_its_capacity_for_the_next_job(slurm):
    run("dacctl", "drain", "dac-server-2", env=slurm.env)
    held = next_job = None
    try:
        held, r = slurm.sbatch(HELD)
        assert held, r.stderr
        job = wait_for(
            lambda: (lambda j: j if j.get("Priority") == "0" else None)(slurm.job(held)),
            120,
            f"job {held} held",
        )
        since = time.monotonic()
        assert "stage_in_failed" in job["Reason"], job["Reason"]
        # Slurm's teardown (Flags=TeardownFailure) gives back Slurm's and dac's share at once
        wait_for(
            lambda: not allocation(slurm, held) and pools(slurm.env)["default"]["free_bricks"] == 4,
            RELEASED_WITHIN,
            f"job {held}'s capacity released: {allocation(slurm, held)}, "
            f"{pools(slurm.env)['default']}",
        )
        released = time.monotonic() - since
        next_job, r = slurm.sbatch(NEXT)
        assert next_job, r.stderr
        done = slurm.wait(next_job, timeout=NEXT_WITHIN)
        assert done["JobState"] == "COMPLETED", done
        ran = time.monotonic() - since - released
        job = slurm.job(held)  # still held, with the user's line
        assert (job["JobState"], job["Priority"]) == ("PENDING", "0"), job
        assert "stage_in_failed" in job["Reason"], job["Reason"]
        print(
            f"\n{slurm.release} {slurm.plugin}: released {released:.1f} s after the hold, "
            f"next job done {ran:.1f} s later"
        )
        # the user puts the missing file in place and the job is released: Slurm runs its
        # setup and stage-in again (before the flag, a released job stayed in staging-in)
        src = Path(slurm.jobs) / "held-in"
        src.write_text("staged at last\n")
        user = pwd.getpwnam(SUBMIT_USER)
        os.chown(src, user.pw_uid, user.pw_gid)
        r = slurm._run(["scontrol", "release", held])
        assert r.returncode == 0, r.stderr
        job = slurm.wait(held, timeout=NEXT_WITHIN)
        assert job["JobState"] == "COMPLETED", job
        assert (Path(slurm.jobs) / f"out-{held}.txt").read_text() == "staged at last\n"
    finally:
        run("dacctl", "undrain", "dac-server-2", env=slurm.env)
        for job_id in filter(None, (held, next_job)):
            if slurm.job(job_id).get("JobState") == "PENDING":
                slurm._run(["scancel", "--hurry", job_id])
                slurm.wait(job_id, timeout=180, remedy_race=True)
