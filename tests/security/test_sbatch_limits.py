"""Limits at sbatch (issue 30): every bound setup enforces, and every request no placement could
ever satisfy, is refused by job_process, so by sbatch, in one line; a script job_process
accepts makes a buffer at setup, never an internal error. A real Slurm 22.05 with each burst
buffer plugin, a real local DAC (2 servers x 2 bricks of 512 MiB: a host holds 1 GiB, the pool
2 GiB, one host per buffer), jobs submitted by an unprivileged user."""

import os
import subprocess

import pytest
from clitools import run, wait_for
from security.entry_helpers import ALICE, dacctl_as
from security.sbatch_dac import sbatch, script_file, slurm_dac

from daccore.errors import UserError
from daccore.records.bounds import MAX_PATH, MAX_STAGE_LINES, MAX_STAGE_TEXT
from daccore.services import admin
from daccore.settings.config import load_config
from daccore.store import Store

JOBDW = "#DW jobdw capacity={} access_mode=striped type=scratch pool=default\n"


@pytest.fixture(scope="module", params=["lua", "datawarp"])
def limits_slurm(request):
    """(env, jobs dir, plugin) of a local DAC wired to a real Slurm; always torn down."""
    yield from slurm_dac(request.param, "limits")


def stage_in(i: int) -> str:
    return f"#DW stage_in type=file source=/tmp/in/f{i} destination=$DW_JOB_STRIPED/f{i}\n"


REFUSED = [
    (
        JOBDW.format("512MiB") + "".join(stage_in(i) for i in range(MAX_STAGE_LINES + 1)),
        f"line {MAX_STAGE_LINES + 3}: stage_in: more than {MAX_STAGE_LINES} stage_in lines: "
        "stage a directory, or name the files in one type=list line",
    ),
    (
        JOBDW.format("512MiB") + f"#DW stage_out type=file source=$DW_JOB_STRIPED/x destination=/"
        f"{'d' * MAX_PATH}\n",
        f"line 3: stage_out: destination is {MAX_PATH + 1} characters long; at most {MAX_PATH}",
    ),
    (
        JOBDW.format("512MiB")
        + "".join(
            f"#DW stage_in type=file source=/{'s' * 3999} destination=$DW_JOB_STRIPED/f{i:03}\n"
            for i in range(140)
        ),
        # 4,000 + 19 bytes a line: the 130th crosses 512 KiB
        f"line {2 + MAX_STAGE_TEXT // 4019 + 1}: stage_in: the stage lines' paths come to more "
        f"than {MAX_STAGE_TEXT // 1024} KiB: stage directories, or name the files in one "
        "type=list line",
    ),
    (
        JOBDW.format("1536MiB"),
        "line 2: jobdw: capacity 1.5GiB is more than one host of pool 'default' holds (1GiB), and "
        "the pool keeps a buffer on one host",
    ),
    (JOBDW.format("3GiB"), "line 2: jobdw: capacity 3GiB is more than pool 'default' holds (2GiB)"),
]


@pytest.mark.parametrize(
    "body,reason", REFUSED, ids=["stage-lines", "path", "stage-text", "one-host", "pool"]
)
def test_sbatch_refuses_what_setup_could_never_build_in_one_line(limits_slurm, body, reason):
    env, jobs, plugin = limits_slurm
    job_id, r = sbatch(env, jobs, body)
    assert job_id is None, f"accepted as job {job_id}: {r.stdout}{r.stderr}"
    assert f"sbatch: error: burst_buffer/{plugin}: {reason}" in r.stderr.splitlines(), r.stderr
    assert "internal error" not in r.stderr


def test_a_request_one_host_holds_runs_after_the_refused_ones(limits_slurm):
    env, jobs, _ = limits_slurm
    job_id, r = sbatch(env, jobs, JOBDW.format("1GiB"))
    assert job_id, r.stderr

    def ended():
        out = subprocess.run(
            ["scontrol", "show", "job", job_id],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
        ).stdout
        over = any(f"JobState={s} " in out for s in ("COMPLETED", "FAILED", "CANCELLED"))
        return out if over and "BurstBufferState=complete" in out else None

    out = wait_for(ended, 120, f"job {job_id} ended")
    assert "JobState=COMPLETED " in out, out


def test_setup_builds_every_script_at_the_bounds_job_process_accepts(limits_slurm):
    env, jobs, _ = limits_slurm
    body = (
        JOBDW.format("1GiB")
        + "".join(stage_in(i) for i in range(MAX_STAGE_LINES))
        + "".join(
            f"#DW stage_out type=file source=$DW_JOB_STRIPED/o{i} destination=/out/o{i}\n"
            for i in range(MAX_STAGE_LINES - 1)
        )
        + f"#DW stage_out type=file source=$DW_JOB_STRIPED/x destination=/{'o' * 4095}\n"
    )
    scripts = os.path.join(os.path.dirname(jobs), "scripts")  # as Slurm's own copy: root's
    os.makedirs(scripts, mode=0o755, exist_ok=True)
    path = script_file(scripts, body)
    r = run("dacctl", "--function", "job_process", "--job", path, env=env, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    job = "4242"
    r = run(
        "dacctl",
        "--function",
        "setup",
        "--token",
        job,
        "--caller",
        "SLURM",
        "--user",
        "1234",
        "--groupid",
        "4321",
        "--job",
        path,
        env=env,
        check=False,
        timeout=120,
    )
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        store = Store.from_settings(load_config(env["DAC_CONFIG"], env={}).etcd)
        made = store.buffer(job)
        assert made is not None
        request = made.record.request
        assert (len(request.stage_in), len(request.stage_out)) == (MAX_STAGE_LINES,) * 2
        assert max(len(s.destination) for s in request.stage_out) == MAX_PATH
    finally:
        run(
            "dacctl",
            "--function",
            "teardown",
            "--token",
            job,
            "--job",
            path,
            "--hurry",
            env=env,
            check=False,
            timeout=120,
        )


def test_a_users_create_persistent_beyond_any_bound_is_a_user_error(limits_slurm):
    """The other way users ask for capacity: `dacctl create-persistent` through the user
    service (a raw request may name any type too). One user line, never an internal one."""
    env, _, _ = limits_slurm
    r = dacctl_as(ALICE, "create-persistent", "--name", "huge", "--capacity", "2048PiB", env=env)
    assert (r.returncode, r.stdout, r.stderr) == (
        1,
        "",
        "dacctl: user error: create_persistent: capacity 2048PiB is more than any pool holds\n",
    )
    config = load_config(env["DAC_CONFIG"], env={})
    with pytest.raises(UserError, match="^create_persistent: type 'cache' is not supported"):
        admin.create_persistent(
            Store.from_settings(config.etcd),
            config,
            "cached",
            1 << 20,
            None,
            "striped",
            "cache",
            ALICE,
        )
