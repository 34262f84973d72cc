"""Real sbatch against a real Slurm, through burst_buffer/lua and burst_buffer/datawarp; the
tests marked every_release on Slurm 22.05, 24.11 and 26.05 (tests/e2e/conftest.py)."""

import json
import os
import pwd
import time

import pytest
from clitools import pools, run, wait_for

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
    assert lines == [
        f"node1 {striped} private: only-node1",
        f"node2 {striped} private: only-node2",
        f"striped: node1 {SUBMIT_USER},node2 {SUBMIT_USER}, {SUBMIT_USER}:700",
    ]
    # teardown: dacd deletes the filesystem and the buffer, and every brick is free again
    deadline = time.monotonic() + 60
    while pools(slurm.env)["default"]["free_bricks"] != 8:
        assert time.monotonic() < deadline, pools(slurm.env)
        time.sleep(0.2)
    instances = json.loads(run("dacctl", "--function", "show_instances", env=slurm.env).stdout)
    assert job_id not in [i["id"] for i in instances["instances"]]
    mounts = open("/proc/self/mountinfo").read()
    assert f"{slurm.workdir}/nodes/" not in mounts and f"{slurm.workdir}/fs/" not in mounts


@pytest.mark.every_release
def test_a_bad_directive_is_refused_by_sbatch_with_our_one_line(slurm):
    job_id, r = slurm.sbatch(
        "#!/bin/bash\n#DW jobdw capacity=64MiB pool=default acces_mode=striped\necho never\n"
    )
    assert job_id is None and r.returncode == 1
    assert (
        f"sbatch: error: burst_buffer/{slurm.plugin}: line 2: jobdw: unknown key "
        "'acces_mode' (expected capacity, access_mode, type, pool)"
    ) in r.stderr.splitlines()
    assert "Traceback" not in r.stderr


def test_a_request_bigger_than_the_pool_is_refused_before_it_queues(slurm):
    job_id, r = slurm.sbatch(
        "#!/bin/bash\n#DW jobdw capacity=1TiB pool=default access_mode=striped\necho never\n"
    )
    assert job_id is None
    assert "line 2: jobdw: capacity 1TiB is more than pool 'default' holds (4GiB)" in r.stderr


@pytest.mark.every_release
def test_scontrol_show_burst_lists_our_pool_with_its_sizes(slurm):
    """Slurm asks for the pools every 30 s (AGENT_INTERVAL): after a fault test left etcd out
    of reach for a while, its view can still be the outage's until the next ask (seen once,
    the pool's sizes not those of the local DAC, in a full run on a loaded machine)."""
    deadline = time.monotonic() + 70
    while "Granularity=512MiB TotalSpace=4GiB" not in (out := slurm.scontrol("show", "burst")):
        assert time.monotonic() < deadline, out
        time.sleep(1)
    assert f"Name={slurm.plugin}" in out


@pytest.mark.every_release
def test_scontrol_show_bbstat_shows_the_pools(slurm):
    # both plugins run dac-bbstat: no job id shows the pools as Cray's dwstat does, and
    # nothing but a job id or a dwstat view is accepted
    out = slurm.scontrol("show", "bbstat")
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["pool", "units", "quantity", "free", "gran"], out
    assert rows[1][:2] == ["default", "bytes"] and "512MiB" in rows[1], out
    out = slurm.scontrol("show", "bbstat", "hosts")
    assert (
        out.strip() == "dac-bbstat: usage: scontrol show bbstat [job id | pools | sessions "
        "| instances | configurations | activations]"
    ), out


STAGED_JOB = """#!/bin/bash
#SBATCH -N 2
#SBATCH -o @JOBS@/out-%j.txt
#DW jobdw capacity=100MiB access_mode=striped type=scratch pool=default
#DW stage_in type=directory source=@JOBS@/in-@TAG@ destination=$DW_JOB_STRIPED/in
#DW stage_out type=directory source=$DW_JOB_STRIPED/out destination=@JOBS@/out-@TAG@
mkdir "$DW_JOB_STRIPED/out"
srun bash -c 'tr a-z A-Z < "$DW_JOB_STRIPED/in/words" > "$DW_JOB_STRIPED/out/$SLURMD_NODENAME"'
"""


@pytest.mark.every_release
@pytest.mark.every_etcd
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
    # the release's own client commands (first on PATH) work for the user as for root
    for argv in (
        ["scontrol", "show", "job", job_id],
        ["squeue", "-h", "-u", SUBMIT_USER],
        ["sinfo", "-h"],
    ):
        r = slurm._run(["runuser", "-u", SUBMIT_USER, "--", *argv])
        assert (r.returncode, r.stderr) == (0, ""), (argv, r.stderr)
        assert argv[0] != "scontrol" or "JobState=COMPLETED" in r.stdout


PERSISTENT_JOB = """#!/bin/bash
#SBATCH -N 2
#SBATCH -o @JOBS@/out-%j.txt
#DW persistentdw name=@NAME@
srun bash -c 'echo "$SLURMD_NODENAME" >> "$DW_PERSISTENT_STRIPED_@NAME@/nodes"'
sort "$DW_PERSISTENT_STRIPED_@NAME@/nodes" | tr '\\n' ,
"""


@pytest.mark.every_release
def test_a_persistent_buffer_keeps_its_data_from_one_job_to_the_next(slurm):
    """The first job is submitted before the buffer exists, as Slurm's test35.1 and 35.4 do:
    accepted, and pending until it does (burst_buffer/datawarp holds it; under lua setup
    waits for it)."""
    name = f"proj{slurm.release.replace('.', '')}{slurm.plugin}"
    owner = pwd.getpwnam(SUBMIT_USER)
    first, r = slurm.sbatch(PERSISTENT_JOB.replace("@NAME@", name))
    assert first, r.stderr
    time.sleep(1)
    assert slurm.job(first)["JobState"] == "PENDING"
    if slurm.plugin == "datawarp":
        # Slurm's own way, so its datawarp plugin knows the buffer (it learns of buffers made
        # outside it only when slurmctld starts)
        create = (
            "#!/bin/bash\n#BB create_persistent name=@NAME@ capacity=512MiB "
            "access=striped type=scratch\necho made\n"
        )
        job_id, r = slurm.sbatch(create.replace("@NAME@", name))
        assert job_id, r.stderr
        assert slurm.wait(job_id, timeout=120)["JobState"] == "COMPLETED"
    else:  # root makes it for the user (users' own dacctl: tests/security/test_usersvc_*)
        run(
            "dacctl",
            "create-persistent",
            "--name",
            name,
            "--capacity",
            "512MiB",
            "--user",
            str(owner.pw_uid),
            "--group",
            str(owner.pw_gid),
            env=slurm.env,
        )
    outputs = []
    for job_id in (first, None):
        if job_id is None:
            job_id, r = slurm.sbatch(PERSISTENT_JOB.replace("@NAME@", name))
            assert job_id, r.stderr
        job = slurm.wait(job_id, timeout=120)
        assert job["JobState"] == "COMPLETED", job
        with open(f"{slurm.jobs}/out-{job_id}.txt") as f:
            outputs.append(f.read())
    # the second job finds what the first wrote, on both nodes
    assert outputs == ["node1,node2,", "node1,node1,node2,node2,"], outputs
    if slurm.plugin == "datawarp":
        job_id, r = slurm.sbatch(f"#!/bin/bash\n#BB destroy_persistent name={name}\ntrue\n")
        assert job_id, r.stderr
        assert slurm.wait(job_id, timeout=120)["JobState"] == "COMPLETED"
        wait_for(
            lambda: name not in run("dacctl", "buffers", env=slurm.env).stdout,
            60,
            f"{name} destroyed",
        )
    else:
        r = run("dacctl", "destroy-persistent", name, env=slurm.env)
        assert r.stdout.strip() == f"destroyed persistent buffer {name}", r.stderr
    if slurm.plugin == "lua" and slurm.release != "22.05":
        # Slurm passes job_process the submitter's uid (23.02+): a buffer that exists and is
        # another user's is refused at once, in one line (elsewhere setup refuses it)
        run(
            "dacctl",
            "create-persistent",
            "--name",
            name,
            "--capacity",
            "512MiB",
            "--user",
            "4242",
            "--group",
            "4242",
            env=slurm.env,
        )
        try:
            job_id, r = slurm.sbatch(PERSISTENT_JOB.replace("@NAME@", name))
            assert job_id is None
            assert (
                f"sbatch: error: burst_buffer/lua: line 4: persistentdw: persistent "
                f"buffer '{name}' belongs to another user"
            ) in r.stderr.splitlines()
        finally:
            run("dacctl", "destroy-persistent", name, env=slurm.env)


@pytest.mark.every_release
def test_a_failed_stage_in_holds_the_job_with_our_line_as_its_reason(slurm):
    job_id, r = slurm.sbatch(
        "#!/bin/bash\n#DW jobdw capacity=64MiB access_mode=striped "
        "type=scratch pool=default\n#DW stage_in type=file "
        "source=@JOBS@/missing destination=$DW_JOB_STRIPED/x\necho never\n"
    )
    assert job_id, r.stderr
    try:
        job = wait_for(
            lambda: (lambda j: j if j.get("Priority") == "0" else None)(slurm.job(job_id)),
            60,
            f"job {job_id} held",
        )
        # the user's one line, nothing else (24.11+: a hook's stderr would join it), in the
        # Reason format of each release (25.05 added "JobHeldAdmin: <hook> failed:")
        line = f"buffer {job_id}: stage_in failed: {slurm.jobs}/missing: No such file or directory"
        if slurm.plugin == "datawarp":
            reason = f"burst_buffer/datawarp: dws_data_in: {line} "
        elif tuple(map(int, slurm.release.split("."))) >= (25, 5):
            reason = f"burst_buffer/lua: JobHeldAdmin: slurm_bb_data_in failed: {line}"
        else:
            reason = f"burst_buffer/lua: slurm_bb_data_in: {line}"
        assert job["Reason"] == reason.replace(" ", "_"), job["Reason"]
        assert line in slurm.scontrol("show", "job", job_id)  # SystemComment
    finally:
        slurm._run(["scancel", "--hurry", job_id])
    slurm.wait(job_id, timeout=180, remedy_race=True)
