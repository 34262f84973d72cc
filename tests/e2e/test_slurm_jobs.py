"""Real sbatch against a real Slurm, through burst_buffer/lua and burst_buffer/datawarp."""

import json
import os
import pwd
import time

from clitools import pools, run

from daclocal.slurm import SUBMIT_USER

BUFFER_JOB = """#!/bin/bash
#SBATCH -N 2
#SBATCH -o @JOBS@/out-%j.txt
#DW jobdw capacity=100MiB access_mode=striped,private type=scratch pool=default
srun bash -c 'echo "$SLURMD_NODENAME $(id -un)" > "$DW_JOB_STRIPED/$SLURMD_NODENAME" &&
  touch "$DW_JOB_PRIVATE/only-$SLURMD_NODENAME" &&
  echo "$SLURMD_NODENAME $DW_JOB_STRIPED private: $(ls "$DW_JOB_PRIVATE")"'
echo "striped: $(cat "$DW_JOB_STRIPED"/node* | tr '\\n' ,) $(stat -c %U:%a "$DW_JOB_STRIPED")"
"""


def test_a_job_writes_its_buffer_as_the_user_on_both_nodes(slurm):
    job_id, r = slurm.sbatch(BUFFER_JOB)
    assert job_id, r.stderr
    job = slurm.wait(job_id)
    assert job["JobState"] == "COMPLETED", job
    assert job["BurstBufferState"] == "complete"
    with open(f"{slurm.jobs}/out-{job_id}.txt") as f:
        lines = sorted(f.read().splitlines())
    striped = f"{slurm.workdir}/mnt/{job_id}/striped"
    # each node sees the shared directory at the same path, and a private one of its own
    assert lines == [f"node1 {striped} private: only-node1",
                     f"node2 {striped} private: only-node2",
                     f"striped: node1 {SUBMIT_USER},node2 {SUBMIT_USER}, {SUBMIT_USER}:700"]
    # teardown: dacd deletes the filesystem and the buffer, and every brick is free again
    deadline = time.monotonic() + 60
    while pools(slurm.env)["default"]["free_bricks"] != 8:
        assert time.monotonic() < deadline, pools(slurm.env)
        time.sleep(0.2)
    instances = json.loads(run("dacctl", "--function", "show_instances", env=slurm.env).stdout)
    assert job_id not in [i["id"] for i in instances["instances"]]
    mounts = open("/proc/self/mountinfo").read()
    assert f"{slurm.workdir}/nodes/" not in mounts and f"{slurm.workdir}/fs/" not in mounts


def test_a_bad_directive_is_refused_by_sbatch_with_our_one_line(slurm):
    job_id, r = slurm.sbatch("#!/bin/bash\n#DW jobdw capacity=64MiB pool=default "
                             "acces_mode=striped\necho never\n")
    assert job_id is None and r.returncode == 1
    assert (f"sbatch: error: burst_buffer/{slurm.plugin}: line 2: jobdw: unknown key "
            "'acces_mode' (expected capacity, access_mode, type, pool)") in r.stderr.splitlines()
    assert "Traceback" not in r.stderr


def test_a_request_bigger_than_the_pool_is_refused_before_it_queues(slurm):
    job_id, r = slurm.sbatch("#!/bin/bash\n#DW jobdw capacity=1TiB pool=default "
                             "access_mode=striped\necho never\n")
    assert job_id is None
    assert ("line 2: jobdw: capacity 1TiB is more than pool 'default' holds (4GiB)"
            in r.stderr)


def test_scontrol_show_burst_lists_our_pool_with_its_sizes(slurm):
    out = slurm.scontrol("show", "burst")
    assert f"Name={slurm.plugin}" in out
    assert "Granularity=512MiB TotalSpace=4GiB" in out


def test_scontrol_show_bbstat_shows_the_pools(slurm):
    # both plugins run dac-bbstat: no job id shows the pools, and nothing else is accepted
    out = slurm.scontrol("show", "bbstat")
    assert "POOL" in out and "default" in out and "512MiB" in out and "2/0/0" in out, out
    out = slurm.scontrol("show", "bbstat", "hosts")
    assert out.strip() == "dac-bbstat: usage: scontrol show bbstat [job id]", out


STAGED_JOB = """#!/bin/bash
#SBATCH -N 2
#SBATCH -o @JOBS@/out-%j.txt
#DW jobdw capacity=100MiB access_mode=striped type=scratch pool=default
#DW stage_in type=directory source=@JOBS@/in-@TAG@ destination=$DW_JOB_STRIPED/in
#DW stage_out type=directory source=$DW_JOB_STRIPED/out destination=@JOBS@/out-@TAG@
mkdir "$DW_JOB_STRIPED/out"
srun bash -c 'tr a-z A-Z < "$DW_JOB_STRIPED/in/words" > "$DW_JOB_STRIPED/out/$SLURMD_NODENAME"'
"""


def test_a_job_stages_in_transforms_and_stages_out_as_the_user(slurm):
    user = pwd.getpwnam(SUBMIT_USER)
    tag = slurm.plugin
    src = os.path.join(slurm.jobs, f"in-{tag}")
    os.mkdir(src)
    with open(os.path.join(src, "words"), "w") as f:
        f.write("hello burst buffer\n")
    for path in (src, os.path.join(src, "words")):
        os.chown(path, user.pw_uid, user.pw_gid)
    job_id, r = slurm.sbatch(STAGED_JOB.replace("@TAG@", tag))
    assert job_id, r.stderr
    job = slurm.wait(job_id)
    assert job["JobState"] == "COMPLETED", job
    out = os.path.join(slurm.jobs, f"out-{tag}")
    for node in ("node1", "node2"):
        path = os.path.join(out, node)
        with open(path) as f:
            assert f.read() == "HELLO BURST BUFFER\n"
        st = os.stat(path)
        assert (st.st_uid, st.st_gid) == (user.pw_uid, user.pw_gid)
    assert os.stat(out).st_uid == user.pw_uid
