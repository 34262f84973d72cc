"""Stages a job asks for while it runs (issue 36), at the job's end, through a real Slurm:
an immediate stage still running when the job ends is finished before teardown; at-job-end
stages run after the job's own `#DW stage_out` lines, in order, a ring of revocable ones
draining only its newest; `scancel --hurry` cancels them; a failed one keeps the buffer as a
failed `#DW stage_out` does; dacd killed mid-stage and started again finishes it."""

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from e2e.test_slurm_faults import restart_dacd
from security.injob_client import client_argv, shell

from daccore.settings.config import load_config
from daccore.store import Store

MiB = 1 << 20


def _client(slurm) -> str:
    path = Path(slurm.jobs) / "client"
    if not path.exists():
        path.write_text(f'#!/bin/sh\nexec {shell(client_argv(Path(slurm.workdir)))} "$@"\n')
        path.chmod(0o755)
    return str(path)


def _job(slurm, tag: str, directives: str, body: str) -> str:
    script = f"""#!/bin/bash
#SBATCH -N 1
#SBATCH -o @JOBS@/{tag}-%j.txt
#DW jobdw capacity=1GiB access_mode=striped type=scratch pool=default
{directives}
C={_client(slurm)}
J=@JOBS@/{tag}
S=$DW_JOB_STRIPED
mkdir -p $J
out() {{ # SOURCE DESTINATION [key=value...]: a stage out of this job, its reply on stdout
  src=$1 dst=$2; shift 2
  $C stage-start job=$SLURM_JOB_ID node=$SLURMD_NODENAME type=file direction=out \\
    source=$src destination=$dst "$@"
}}
{body}
"""
    job, r = slurm.sbatch(script)
    assert job, r.stderr
    return job


def _store(slurm) -> Store:
    return Store.from_settings(load_config(str(Path(slurm.workdir) / "dac.yaml"), env={}).etcd)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.every_release
def test_job_end_finishes_running_stages_then_at_job_end_ones_after_dw_lines(slurm):
    j = Path(slurm.jobs) / "end"
    job = _job(
        slurm,
        "end",
        "#DW stage_out type=file source=$DW_JOB_STRIPED/final destination=@JOBS@/end/final",
        """
echo from-dw-line > $S/final
echo from-at-job-end > $S/final.2
head -c 256M /dev/urandom > $S/big
sha256sum < $S/big | cut -d' ' -f1 > $J/big.sha
out $S/final.2 $J/final when=at_job_end > $J/r-final.json
for i in 1 2 3 4; do
  head -c 4M /dev/urandom > $S/ckpt.$i
  sha256sum < $S/ckpt.$i | cut -d' ' -f1 > $J/ckpt.$i.sha
  out $S/ckpt.$i $J/ckpt when=at_job_end revocable=true > $J/r-ckpt.$i.json
done
$C stage-wait job=$SLURM_JOB_ID ids=2,3,4 timeout=15 > $J/ring.json
out $S/big $J/big > $J/r-big.json
""",
    )
    ended = slurm.wait(job, timeout=300)
    assert ended["JobState"] == "COMPLETED", (ended, slurm.logs())
    ring = json.loads((j / "ring.json").read_text())["ok"]
    assert [s["state"] for s in ring["stages"]] == ["revoked", "revoked", "revoked"], ring
    assert json.loads((j / "r-big.json").read_text())["ok"]["state"] == "queued"
    # the immediate stage, still running when the job ended, finished before teardown
    assert _sha(j / "big") == (j / "big.sha").read_text().strip()
    # the ring drained only its newest; the at-job-end stage came after the #DW line
    assert _sha(j / "ckpt") == (j / "ckpt.4.sha").read_text().strip()
    assert (j / "final").read_text() == "from-at-job-end\n"
    assert _store(slurm).buffer(job) is None  # torn down, its stages with it


def test_scancel_hurry_cancels_the_at_job_end_stages(slurm):
    j = Path(slurm.jobs) / "hurry"
    job = _job(
        slurm,
        "hurry",
        "",
        """
head -c 4M /dev/urandom > $S/ckpt
out $S/ckpt $J/ckpt when=at_job_end > $J/r.json
touch $J/ready
sleep 300
""",
    )
    deadline = time.monotonic() + 120
    while not (j / "ready").exists():
        assert time.monotonic() < deadline, slurm.logs()
        time.sleep(0.5)
    assert json.loads((j / "r.json").read_text())["ok"]["when"] == "at_job_end"
    # bbstat (both plugins run dac-bbstat) counts the stages the job asked for
    assert "in-job stages: 1 queued" in slurm.scontrol("show", "bbstat", job)
    r = subprocess.run(
        ["scancel", "--hurry", job],
        capture_output=True,
        text=True,
        env={**os.environ, **slurm.env},
    )
    assert r.returncode == 0, r.stderr
    slurm.wait(job, timeout=120)
    assert not (j / "ckpt").exists()
    assert _store(slurm).buffer(job) is None


def test_a_failed_at_job_end_stage_keeps_the_buffer_as_a_failed_stage_out(slurm):
    j = Path(slurm.jobs) / "fails"
    job = _job(
        slurm,
        "fails",
        "",
        """
echo x > $S/gone
out $S/gone $J/gone when=at_job_end > $J/r.json
rm $S/gone
""",
    )
    store = _store(slurm)
    deadline = time.monotonic() + 180
    while True:  # teardown stages out, fails with the stage's line, and keeps the buffer
        errors = [s.error.message for s in store.statuses(job).values() if s.error]
        if any("in-job stage 1 failed" in e for e in errors):
            break
        assert time.monotonic() < deadline, slurm.logs()
        time.sleep(0.5)
    assert "gone" in errors[0] and store.buffer(job) is not None
    assert not (j / "gone").exists()
    subprocess.run(["scancel", "--hurry", job], env={**os.environ, **slurm.env}, check=True)
    deadline = time.monotonic() + 180
    while store.buffer(job) is not None:  # a hurried teardown then deletes it
        assert time.monotonic() < deadline, slurm.logs()
        time.sleep(0.5)


def test_a_dacd_killed_mid_stage_and_started_again_finishes_it(slurm):
    j = Path(slurm.jobs) / "restart"
    job = _job(
        slurm,
        "restart",
        "",
        """
head -c 384M /dev/urandom > $S/big
sha256sum < $S/big | cut -d' ' -f1 > $J/big.sha
out $S/big $J/big > $J/r.json
until $C stage-wait job=$SLURM_JOB_ID timeout=30 > $J/wait.json && \\
  grep -q '"done": true' $J/wait.json; do :; done
""",
    )
    store = _store(slurm)
    deadline = time.monotonic() + 180
    while True:  # killed while the copy runs
        stages = store.job_stages(job)
        if stages and stages[0][1] is not None and stages[0][1].state.value == "running":
            host = stages[0][0].host
            break
        assert time.monotonic() < deadline, slurm.logs()
        time.sleep(0.05)
    workdir = Path(slurm.workdir)
    state = json.loads((workdir / "state.json").read_text())
    os.kill(next(d["pid"] for d in state["dacd"] if d["host"] == host), signal.SIGKILL)
    while host in store.alive():
        assert time.monotonic() < deadline + 60
        time.sleep(0.1)
    restart_dacd(workdir, host)
    ended = slurm.wait(job, timeout=300)
    assert ended["JobState"] == "COMPLETED", (ended, slurm.logs())
    wait = json.loads((j / "wait.json").read_text())["ok"]["stages"][0]
    assert (wait["state"], wait["bytes_done"]) == ("done", 384 * MiB)
    assert wait["started_at"] > 0
    assert _sha(j / "big") == (j / "big.sha").read_text().strip()


@pytest.mark.every_release
def test_the_c_example_drains_its_checkpoints_while_it_computes(slurm):
    """libdacstage's example, built from the installed sources with the system cc, in a real
    job: four 8 MiB checkpoints a second apart, each drained while the next is computed, all
    on the destination byte for byte; then a ring of three at-job-end revocable ones, of which
    the newest alone is there after the job."""
    from daccore.share import asset

    build = Path(slurm.jobs) / "cbuild"
    r = subprocess.run(
        ["make", "-C", str(asset("libdacstage", directory=True)), f"OUT={build}"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    j = Path(slurm.jobs) / "c"
    job = _job(
        slurm,
        "c",
        "",
        f"""
export DACCTL={slurm.workdir}/bin/dacctl
{build}/checkpoint $J/drained 4 8 1 > $J/drain.txt 2>&1; echo $? > $J/drain.rc
for i in 1 2 3 4; do cmp $S/ckpt.$i $J/drained/ckpt.$i && echo same; done > $J/cmp.txt
{build}/checkpoint $J/ring 3 2 0.2 ring > $J/ring.txt 2>&1; echo $? > $J/ring.rc
sha256sum < $S/ckpt.3 | cut -d' ' -f1 > $J/ring.sha
""",
    )
    ended = slurm.wait(job, timeout=300)
    assert ended["JobState"] == "COMPLETED", (ended, slurm.logs())
    drain = (j / "drain.txt").read_text()
    assert (j / "drain.rc").read_text().strip() == "0", drain
    assert "drained: all 4 checkpoints (the first, stage 1: 8388608 bytes)" in drain
    assert (j / "cmp.txt").read_text().split() == ["same"] * 4
    assert (j / "ring.rc").read_text().strip() == "0", (j / "ring.txt").read_text()
    assert _sha(j / "ring" / "ckpt") == (j / "ring.sha").read_text().strip()
