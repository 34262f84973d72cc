"""Slurm reads a job's `capacity=` itself (bb_get_size_num) and accounts the pool by its own
reading; dac allocates by its own. Every size dac accepts must mean the same to both, or be
refused at submission with one line. A real Slurm 22.05 with each burst buffer plugin, a real
local DAC, jobs submitted by an unprivileged user; `dacctl --function job_process` run as
Slurm runs it."""

import os
import subprocess
import time

import pytest
from clitools import run
from security.sbatch_dac import sbatch, script_file, slurm_dac


@pytest.fixture(scope="module", params=["lua", "datawarp"])
def escaping_slurm(request):
    """(env, jobs dir, plugin) of a local DAC wired to a real Slurm; always torn down."""
    yield from slurm_dac(request.param, "escaping")


def job_process(env, jobs: str, line: str):
    """As Slurm's hook runs it (as SlurmUser, root here), on a script in a directory only
    root can write, as Slurm's own copy is (dacctl refuses one a user could swap)."""
    scripts = os.path.join(os.path.dirname(jobs), "scripts")
    os.makedirs(scripts, mode=0o755, exist_ok=True)
    return run(
        "dacctl",
        "--function",
        "job_process",
        "--job",
        script_file(scripts, line),
        env=env,
        check=False,
    )


REFUSED = [
    (
        "#DW jobdw capacity=1.5GiB pool=default access_mode=striped",
        "line 2: jobdw: capacity '1.5GiB' has a fraction, which Slurm reads as 1 byte: write "
        "1536MiB",
    ),
    (
        "#DW jobdw capacity=\uff11GiB pool=default access_mode=striped",
        "line 2: jobdw: capacity '\uff11GiB' must be written in ASCII digits and letters, as in "
        "10GiB",
    ),
    (
        "#DW jobdw capacity=1Gi pool=default access_mode=striped",
        "line 2: jobdw: capacity '1Gi' has a unit Slurm does not know, so Slurm would read it as "
        "1 byte: use K, M, G, T, P with iB (powers of 1024) or B (powers of 1000), as in 10GiB or "
        "500GB",
    ),
    (
        "#DW jobdw capacity=2N pool=default access_mode=striped",
        "line 2: jobdw: capacity '2N' is a count of nodes, which dac does not allocate by: give a "
        "size, as in 10GiB",
    ),
    (
        "#DW jobdw capacity=1GiB\u00a0pool=default access_mode=striped",
        "line 2: jobdw: contains the space U+00A0; separate words with ASCII spaces",
    ),
]


@pytest.mark.parametrize("line,reason", REFUSED)
def test_job_process_refuses_a_size_slurm_reads_otherwise_in_one_line(escaping_slurm, line, reason):
    env, jobs, _ = escaping_slurm
    r = job_process(env, jobs, line)
    assert (r.returncode, r.stdout) == (1, reason + "\n")


@pytest.mark.parametrize("line,reason", [REFUSED[0], REFUSED[2], REFUSED[4]])
def test_sbatch_refuses_what_slurm_would_account_differently(escaping_slurm, line, reason):
    env, jobs, plugin = escaping_slurm
    job_id, r = sbatch(env, jobs, line)
    # today dac allocates 1GiB or 1.5GiB while Slurm accounts 1 byte (rounded to one brick)
    assert job_id is None, f"accepted as job {job_id}: {r.stdout}{r.stderr}"
    assert f"sbatch: error: burst_buffer/{plugin}: {reason}" in r.stderr.splitlines()


def test_sbatch_refuses_full_width_digits(escaping_slurm):
    env, jobs, _ = escaping_slurm
    job_id, r = sbatch(env, jobs, REFUSED[1][0])
    assert job_id is None and r.returncode == 1  # Slurm reads 0 bytes; dac refuses too


def test_a_whole_size_means_the_same_to_both_and_the_job_runs(escaping_slurm):
    env, jobs, _ = escaping_slurm
    job_id, r = sbatch(env, jobs, "#DW jobdw capacity=1024MiB pool=default access_mode=striped")
    assert job_id is not None, r.stderr
    deadline = time.monotonic() + 90
    seen = set()
    while time.monotonic() < deadline:
        burst = subprocess.run(
            ["scontrol", "show", "burst"], capture_output=True, text=True, env={**os.environ, **env}
        ).stdout
        seen |= {w for w in burst.split() if w.startswith("Size=")}
        state = subprocess.run(
            ["scontrol", "show", "job", job_id],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
        ).stdout
        if "JobState=COMPLETED" in state and "BurstBufferState=complete" in state:
            break
        time.sleep(0.2)
    assert "JobState=COMPLETED" in state, state
    # Slurm accounted what dac allocated: 2 bricks of 512MiB
    assert seen <= {"Size=1GiB"} and seen, seen
