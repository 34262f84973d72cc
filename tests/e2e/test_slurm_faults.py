"""Issue 19's faults through a real Slurm. dacd killed (-9) during a job's stage-in and started
again once its lease has lapsed, as systemd would: the job must not notice (before
restart_grace, a lapsed lease made data_in fail at once, Slurm held the job, and it stayed
PENDING with BurstBufferState=staging-in for good). etcd gone, or quorum lost on three
members: Slurm is never held by dac. (slurmctld restarted mid-stage: test_slurmctld_restart.py.)"""

import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path

from daccore.settings.config import load_config
from daccore.store import Store
from daclocal.cluster import LocalState
from daclocal.procs import child_env, spawn
from daclocal.slurm import SUBMIT_USER
from dacservice.answerer.mirror import FRESH_FOR

STAGED_JOB = """#!/bin/bash
#SBATCH -N 1
#SBATCH -o @JOBS@/out-%j.txt
#DW jobdw capacity=512MiB access_mode=striped type=scratch pool=default
#DW stage_in type=directory source=@JOBS@/data destination=$DW_JOB_STRIPED/in
cd "$DW_JOB_STRIPED/in" && sha256sum f* | sha256sum
"""


def restart_dacd(workdir: Path, host: str) -> int:
    """dacd for `host` again, with the command line `up` gave it, recorded in state.json so
    the session's later tests and `down` find it."""
    state = LocalState.load(workdir)
    assert state is not None
    d = next(d for d in state.dacd if d["host"] == host)
    proc = spawn(
        [
            sys.executable,
            "-m",
            "dacd.main",
            "--config",
            str(state.config_path),
            "--host",
            host,
            "--metrics-address",
            d["metrics"],
        ],
        workdir / "logs" / f"dacd-{host}.log",
        child_env(DAC_CONFIG=str(state.config_path)),
    )
    d["pid"] = proc.pid
    state.save()
    return proc.pid


def test_a_dacd_restarted_during_stage_in_costs_the_job_nothing(slurm):
    from clitools import revision, step_started

    data = Path(slurm.jobs) / "data"
    data.mkdir(mode=0o755, exist_ok=True)
    block = os.urandom(8 << 20)
    for i in range(48):  # 384 MiB: the stage outlives the kill
        (data / f"f{i:03}").write_bytes(i.to_bytes(4, "big") + block[4:])
    expected = hashlib.sha256(
        "".join(
            f"{hashlib.sha256((data / n).read_bytes()).hexdigest()}  {n}\n"
            for n in sorted(os.listdir(data))
        ).encode()
    ).hexdigest()
    workdir = Path(slurm.workdir)
    store = Store.from_settings(load_config(str(workdir / "dac.yaml"), env={}).etcd)
    since = revision(store)
    job_id, r = slurm.sbatch(STAGED_JOB)
    assert job_id, r.stderr
    # killed as the stage starts: a poll could see it only as it ends, and the kill then
    # come after the stage was recorded done (seen)
    host = step_started(store, job_id, None, "stage_in", since)
    deadline = time.monotonic() + 120
    state = json.loads((workdir / "state.json").read_text())
    os.kill(next(d["pid"] for d in state["dacd"] if d["host"] == host), signal.SIGKILL)
    while host in store.alive():  # lease_ttl 5 s
        assert time.monotonic() < deadline + 30
        time.sleep(0.1)
    time.sleep(2)  # well past the lapse, as the restart 4 s after the kill was
    restarted = restart_dacd(workdir, host)
    job = slurm.wait(job_id, timeout=300)
    assert job["JobState"] == "COMPLETED", job
    with open(f"{slurm.jobs}/out-{job_id}.txt") as f:
        assert f.read().split()[0] == expected  # every byte staged, by the restarted dacd
    log = (workdir / "logs" / f"dacd-{host}.log").read_text(errors="replace")
    # run again by the restarted dacd (the killed one may die between its status write and
    # its own line, killed as the stage starts)
    assert (
        f"dacd[{restarted}] dacd.reconciler: buffer {job_id} (job {job_id}): stage_in on "
        f"{host}" in log
    )
    assert store.buffer(job_id) is None


def test_past_the_grace_the_job_is_held_with_our_line_and_its_remedy_works(slurm):
    """dacd not back within restart_grace (3 s here): Slurm holds the job with the one line as
    its Reason; doing what the line says (start dacd, then scancel) tears the buffer down and
    every brick comes back."""
    from clitools import pools

    workdir = Path(slurm.workdir)
    config = workdir / "dac.yaml"
    original = config.read_text()
    config.write_text(original + "restart_grace: 3\n")
    store = Store.from_settings(load_config(str(config), env={}).etcd)
    try:
        job_id, r = slurm.sbatch(
            STAGED_JOB.replace("@JOBS@/data", "/etc/hostname").replace(
                "type=directory", "type=file"
            )
        )
        assert job_id, r.stderr
        deadline = time.monotonic() + 120
        while store.buffer(job_id) is None:
            assert time.monotonic() < deadline, slurm.job(job_id)
            time.sleep(0.02)
        made = store.buffer(job_id)
        assert made is not None
        host = made.record.allocation.primary_host
        state = json.loads((workdir / "state.json").read_text())
        os.kill(next(d["pid"] for d in state["dacd"] if d["host"] == host), signal.SIGKILL)
        while (job := slurm.job(job_id)).get("Priority") != "0":
            assert time.monotonic() < deadline + 60, job
            time.sleep(0.2)
        assert f"storage_host_{host}_is_down" in job["Reason"], job["Reason"]
        assert f"scancel_{job_id}" in job["Reason"], job["Reason"]
        restart_dacd(workdir, host)  # the remedy: start dacd there, then scancel the job
        slurm._run(["scancel", job_id])
        job = slurm.wait(job_id, timeout=180, remedy_race=True)  # Slurm's race: 22.05 too
        assert job["JobState"] == "CANCELLED", job
        deadline = time.monotonic() + 60
        while store.buffer(job_id) is not None or pools(slurm.env)["default"]["free_bricks"] != 8:
            assert time.monotonic() < deadline, (store.buffer(job_id), pools(slurm.env))
            time.sleep(0.2)
    finally:
        config.write_text(original)


def ping_and_pools_answer_with_etcd_gone(slurm, took: dict) -> None:
    """`scontrol ping` answers UP and `dacctl pools` fails in one line; their times in `took`."""
    from clitools import run

    start = time.monotonic()
    ping = slurm._run(["scontrol", "ping"])
    took["scontrol ping"] = time.monotonic() - start
    assert ping.returncode == 0 and "UP" in ping.stdout, ping.stdout + ping.stderr
    start = time.monotonic()
    r = run("dacctl", "pools", env=slurm.env, check=False, timeout=60)
    took["dacctl pools"] = time.monotonic() - start
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("dacctl: admin error: etcd unreachable at "), r.stderr


def seconds_until_pools_answer(slurm, what: str) -> float:
    """How long `dacctl pools` takes to succeed again once etcd is back (at most 60 s)."""
    from clitools import run

    start = time.monotonic()
    while run("dacctl", "pools", env=slurm.env, check=False).returncode != 0:
        assert time.monotonic() - start < 60, what
        time.sleep(0.2)
    return time.monotonic() - start


def test_etcd_down_never_holds_slurm_and_jobs_go_on_when_it_is_back(slurm):
    """etcd gone (the local DAC's one member killed: as quorum lost, nothing answers): sbatch of
    a #DW job answers within 20 s with one line, scontrol ping answers, `dacctl pools` fails
    within 20 s in one line; etcd started again on its data, a job runs through its buffer."""
    workdir = Path(slurm.workdir)
    state = LocalState.load(workdir)
    assert state is not None
    pid = state.etcd["pid"]
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]]
    os.kill(pid, signal.SIGKILL)
    try:
        # the answerer answers from its copy of etcd while a probe confirmed it within
        # FRESH_FOR (as the fork would have read etcd a moment before); past that it refuses
        # and the hook's fork says etcd is unreachable
        time.sleep(FRESH_FOR + 0.5)
        start = time.monotonic()
        job_id, r = slurm.sbatch(
            "#!/bin/bash\n#DW jobdw capacity=64MiB access_mode=striped "
            "type=scratch pool=default\ntrue\n"
        )
        took = {"sbatch": time.monotonic() - start}
        assert job_id is None and "etcd unreachable" in r.stderr, (job_id, r.stderr)
        ping_and_pools_answer_with_etcd_gone(slurm, took)
        assert max(took.values()) < 20, took
    finally:
        proc = spawn(argv, workdir / "etcd" / "etcd.log")  # on its data, as systemd would
        state.etcd["pid"] = proc.pid
        for m in state.etcd.get("members", []):
            m["pid"] = proc.pid
        state.save()
    back = seconds_until_pools_answer(slurm, "etcd did not come back")
    job_id, r = slurm.sbatch(
        "#!/bin/bash\n#DW jobdw capacity=64MiB access_mode=striped "
        "type=scratch pool=default\ntouch $DW_JOB_STRIPED/x\n"
    )
    assert job_id, r.stderr
    assert slurm.wait(job_id, timeout=180)["JobState"] == "COMPLETED"
    print(
        f"\netcd down: {', '.join(f'{k} {v:.1f}s' for k, v in took.items())}; "
        f"pools answered {back:.1f}s after etcd's restart"
    )


QUORUM_JOB = """#!/bin/bash
#SBATCH -N 1
#SBATCH -o @JOBS@/out-%j.txt
#DW jobdw capacity=512MiB access_mode=striped type=scratch pool=default
#DW stage_in type=file source=@JOBS@/qdata destination=$DW_JOB_STRIPED/in
#DW stage_out type=file source=$DW_JOB_STRIPED/out destination=@JOBS@/@OUT@
for i in $(seq 900); do [ -e @JOBS@/go ] && break; sleep 0.2; done
cp "$DW_JOB_STRIPED/in" "$DW_JOB_STRIPED/out"
"""


def test_quorum_lost_never_holds_slurm_and_the_jobs_go_on_when_it_is_back(slurm_etcd3):
    """Two of three etcd members killed (-9) while a job runs on its buffer and a second waits
    for it (afterok): sbatch of a #DW job answers within 20 s in one line, scontrol ping
    answers, `dacctl pools` fails within 20 s in one line. The first job then ends while quorum
    is lost: its post_run rides the outage out. The members started again on their data, both
    jobs complete with every byte staged out and every brick back."""
    from clitools import pools

    slurm = slurm_etcd3
    workdir = Path(slurm.workdir)
    data = os.urandom(32 << 20)
    (Path(slurm.jobs) / "qdata").write_bytes(data)
    os.chmod(Path(slurm.jobs) / "qdata", 0o644)
    first, r = slurm.sbatch(QUORUM_JOB.replace("@OUT@", "qout1"))
    assert first, r.stderr
    path = os.path.join(slurm.jobs, f"job{time.monotonic_ns()}.sh")
    with open(path, "w") as f:
        f.write(QUORUM_JOB.replace("@JOBS@", slurm.jobs).replace("@OUT@", "qout2"))
    os.chmod(path, 0o644)
    r = slurm._run(
        [
            "runuser",
            "-u",
            SUBMIT_USER,
            "--",
            "sbatch",
            "--parsable",
            f"--dependency=afterok:{first}",
            path,
        ],
        cwd=slurm.jobs,
    )
    second = r.stdout.strip()
    assert r.returncode == 0 and second, r.stderr
    deadline = time.monotonic() + 120
    while slurm.job(first).get("JobState") != "RUNNING":
        assert time.monotonic() < deadline, slurm.job(first)
        time.sleep(0.2)
    state = LocalState.load(workdir)
    assert state is not None
    lost = state.etcd["members"][1:]
    argvs = {
        m["name"]: [
            a.decode() for a in Path(f"/proc/{m['pid']}/cmdline").read_bytes().split(b"\0")[:-1]
        ]
        for m in lost
    }
    for m in lost:
        os.kill(m["pid"], signal.SIGKILL)
    try:
        time.sleep(FRESH_FOR + 0.5)  # past the answerer's freshness bound (the test above)
        start = time.monotonic()
        job_id, r = slurm.sbatch(
            "#!/bin/bash\n#DW jobdw capacity=64MiB access_mode=striped "
            "type=scratch pool=default\ntrue\n"
        )
        took = {"sbatch": time.monotonic() - start}
        ours = [line for line in r.stderr.splitlines() if "burst_buffer/lua: " in line]
        assert job_id is None and len(ours) == 1 and "etcd unreachable" in ours[0], r.stderr
        ping_and_pools_answer_with_etcd_gone(slurm, took)
        assert max(took.values()) < 20, took
        assert slurm.job(first)["JobState"] == "RUNNING"
        assert slurm.job(second)["JobState"] == "PENDING"
        # the first job ends during the outage: Slurm's post_run waits for etcd (within
        # restart_grace) instead of failing the job's stage-out
        (Path(slurm.jobs) / "go").touch()
        deadline = time.monotonic() + 60
        while (job := slurm.job(first)).get("BurstBufferState") != "post-run":
            assert time.monotonic() < deadline and job["JobState"] in ("RUNNING", "COMPLETING"), job
            time.sleep(0.2)
        ended = time.monotonic()
        time.sleep(3)  # post_run waits through 3 s more of the outage, and the job with it
        job = slurm.job(first)
        assert job["BurstBufferState"] == "post-run" and job["JobState"] != "FAILED", job
    finally:
        for m in lost:  # on their data, as systemd would
            m["pid"] = spawn(argvs[m["name"]], workdir / "etcd" / f"{m['name']}.log").pid
        state.save()
    back = seconds_until_pools_answer(slurm, "quorum did not come back")
    for job_id in (first, second):
        job = slurm.wait(job_id, timeout=180)
        assert job["JobState"] == "COMPLETED", job
        took.setdefault("first job's post_run to its completion", time.monotonic() - ended)
    for out in ("qout1", "qout2"):
        assert (Path(slurm.jobs) / out).read_bytes() == data
    store = Store.from_settings(load_config(str(workdir / "dac.yaml"), env={}).etcd)
    assert store.buffer(first) is None and store.buffer(second) is None
    assert pools(slurm.env)["default"]["free_bricks"] == 8
    print(
        f"\nquorum lost: {', '.join(f'{k} {v:.1f}s' for k, v in took.items())}; "
        f"pools answered {back:.1f}s after the members' restart"
    )
