"""What Slurm's own burst-buffer tests (testsuite/expect/test35.*) and sites' older scripts
write, through a real Slurm on every release with both plugins: a job naming a persistent
buffer that a later job makes, a key given twice with the same value, a list stage whose
lines name their own destinations."""

import os
import pwd
import time

import pytest
from clitools import run, wait_for

from daclocal.slurm import SUBMIT_USER

USES = """#!/bin/bash
#SBATCH -N 1
#SBATCH -o @JOBS@/out-%j.txt
#DW persistentdw name=@NAME@
echo used > "$DW_PERSISTENT_STRIPED_@NAME@/used" && cat "$DW_PERSISTENT_STRIPED_@NAME@/used"
"""


def _make(slurm, name: str, uid: int, gid: int) -> None:
    """The persistent buffer, made as a site's users make one under each plugin."""
    if slurm.plugin == "datawarp":  # a job of Slurm's, so its datawarp plugin knows the buffer
        job_id, r = slurm.sbatch(f"#!/bin/bash\n#BB create_persistent name={name} "
                                 "capacity=512MiB access=striped type=scratch\ntrue\n")
        assert job_id, r.stderr
        assert slurm.wait(job_id)["JobState"] == "COMPLETED"
    else:
        run("dacctl", "create-persistent", "--name", name, "--capacity", "512MiB", "--user",
            str(uid), "--group", str(gid), env=slurm.env)


def _destroy(slurm, name: str) -> None:
    if slurm.plugin == "datawarp":
        job_id, r = slurm.sbatch(f"#!/bin/bash\n#BB destroy_persistent name={name}\ntrue\n")
        assert job_id, r.stderr
        assert slurm.wait(job_id)["JobState"] == "COMPLETED"
        wait_for(lambda: name not in run("dacctl", "buffers", env=slurm.env).stdout,
                 60, f"{name} destroyed")
    else:
        run("dacctl", "destroy-persistent", name, env=slurm.env)


@pytest.mark.every_release
def test_a_job_naming_a_persistent_buffer_made_later_waits_for_it(slurm):
    """test35.1's order: the job using the buffer is submitted before the job making it.
    Slurm's datawarp plugin holds the job until the buffer exists; under burst_buffer/lua
    setup waits for it."""
    user = pwd.getpwnam(SUBMIT_USER)
    name = f"later{slurm.release.replace('.', '')}{slurm.plugin}"
    job_id, r = slurm.sbatch(USES.replace("@NAME@", name))
    assert job_id, r.stderr  # accepted at submission, buffer or not
    time.sleep(2)
    job = slurm.job(job_id)
    assert job["JobState"] == "PENDING", job  # waiting, not failed
    _make(slurm, name, user.pw_uid, user.pw_gid)
    job = slurm.wait(job_id, timeout=120)
    assert job["JobState"] == "COMPLETED", job
    with open(f"{slurm.jobs}/out-{job_id}.txt") as f:
        assert f.read() == "used\n"
    _destroy(slurm, name)
    if slurm.plugin == "lua" and slurm.release != "22.05":
        # Slurm passes job_process the submitter's uid (23.02+): another's buffer is refused
        # at once, in one line
        run("dacctl", "create-persistent", "--name", name, "--capacity", "512MiB", "--user",
            "4242", "--group", "4242", env=slurm.env)
        try:
            job_id, r = slurm.sbatch(USES.replace("@NAME@", name))
            assert job_id is None
            assert (f"sbatch: error: burst_buffer/lua: line 4: persistentdw: persistent "
                    f"buffer '{name}' belongs to another user") in r.stderr.splitlines()
        finally:
            run("dacctl", "destroy-persistent", name, env=slurm.env)


LISTED = """#!/bin/bash
#SBATCH -N 1
#SBATCH -o @JOBS@/out-%j.txt
#DW jobdw type=scratch capacity=64MiB access_mode=striped pool=default type=scratch
#DW stage_in type=list source=@JOBS@/list-@TAG@
cat "$DW_JOB_STRIPED/one" "$DW_JOB_STRIPED/sub/two"
"""


@pytest.mark.every_release
def test_a_repeated_key_and_a_list_naming_its_own_destinations_are_staged(slurm):
    """test35.2/35.3/35.6 write `type=scratch` twice; data-acc's and NERSC's scripts stage a
    list without destination=, each of its lines naming where its file goes."""
    user = pwd.getpwnam(SUBMIT_USER)
    tag = f"{slurm.release}-{slurm.plugin}"
    files = {f"one-{tag}": "1\n", f"two-{tag}": "2\n",
             f"list-{tag}": f"{slurm.jobs}/one-{tag} $DW_JOB_STRIPED/one\n"
                            f"{slurm.jobs}/two-{tag} sub/two\n"}
    for name, text in files.items():
        path = os.path.join(slurm.jobs, name)
        with open(path, "w") as f:
            f.write(text)
        os.chown(path, user.pw_uid, user.pw_gid)
    job_id, r = slurm.sbatch(LISTED.replace("@TAG@", tag))
    assert job_id, r.stderr
    job = slurm.wait(job_id, timeout=120)
    assert job["JobState"] == "COMPLETED", job
    with open(f"{slurm.jobs}/out-{job_id}.txt") as f:
        assert f.read() == "1\n2\n"
