"""slurmctld killed (-9) and started again during a job's stage-in and stage-out (issue 19).

Each kill comes once slurmctld's state files hold the job as it is then: a kill before that
finds Slurm's own saved state behind what it had done, which no burst buffer can mend
(docs/reliability.md, "slurmctld restarted: what Slurm does"). Seen before the stage-out kill
waited for it: a kill within 5 s of the job's end (slurmctld's SAVE_MAX_WAIT) brought the
job back RUNNING for good."""

import contextlib
import hashlib
import os
import pwd
import re
import signal
import struct
import time
from pathlib import Path

import pytest

from daccore.settings.config import load_config
from daccore.store import Store
from daclocal.cluster import LocalState, restart_slurmctld
from daclocal.slurm import SUBMIT_USER

RESTART_JOB = """#!/bin/bash
#SBATCH -N 1
#SBATCH -o @JOBS@/out-%j.txt
#DW jobdw capacity=1GiB access_mode=striped type=scratch pool=default
#DW stage_in type=directory source=@JOBS@/rdata destination=$DW_JOB_STRIPED/in
#DW stage_out type=directory source=$DW_JOB_STRIPED/out destination=@JOBS@/rout
cd "$DW_JOB_STRIPED/in" && sha256sum f* | sha256sum && cp -a . ../out
"""


def _copier_group(workdir: Path, host: str) -> int:
    """The process group of the stage's copier (dacd starts it as the job's user, in a
    session of its own), once it runs."""
    state = LocalState.load(workdir)
    assert state is not None
    dacd = next(d["pid"] for d in state.dacd if d["host"] == host)
    uid = str(pwd.getpwnam(SUBMIT_USER).pw_uid)
    deadline = time.monotonic() + 30
    while True:
        for d in Path("/proc").iterdir():
            try:
                status = dict(
                    line.split(":\t", 1)
                    for line in (d / "status").read_text().splitlines()
                    if ":\t" in line
                )
                if status["PPid"].strip() == str(dacd) and status["Uid"].split()[0] == uid:
                    return os.getpgid(int(d.name))
            except (OSError, KeyError):
                continue
        assert time.monotonic() < deadline, f"no copier under dacd {dacd}"
        time.sleep(0.02)


def _kill_and_restart_slurmctld(workdir: Path) -> float:
    """slurmctld killed (-9) and started again as systemd would; seconds until it answers."""
    state = LocalState.load(workdir)
    assert state is not None
    os.kill(state.slurm["pids"]["slurmctld"], signal.SIGKILL)
    start = time.monotonic()
    restart_slurmctld(workdir)
    return time.monotonic() - start


def _restart_once_saved(
    slurm, store, job_id: str, step: str, since: int, until_torn_down: bool = False
) -> tuple[float, float]:
    """As `step` starts, its copier held (SIGSTOP) so the stage outlives the wait: once
    slurmctld's state files hold the job as it is now, slurmctld killed (-9) and started again;
    seconds until it answers, and the time (time.time()) it did. A kill before that save finds
    Slurm's own state behind what it did (docs/reliability.md): seen, a job that had ended
    recovered as RUNNING. With `until_torn_down`, the copier is held until Slurm's teardown
    reaches dac (the spec says deleted), so the teardown meets the stage under way: released
    at the restart, a 384 MiB stage finished before 26.05's teardown came, 16 s later (seen)."""
    from clitools import step_started, wait_for

    workdir = Path(slurm.workdir)
    host = step_started(store, job_id, None, step, since, timeout=180)
    group = _copier_group(workdir, host)
    os.killpg(group, signal.SIGSTOP)
    try:
        _wait_until_slurm_saved(slurm, job_id)
        took = _kill_and_restart_slurmctld(workdir)
        answered = time.time()
        if until_torn_down:
            wait_for(
                lambda: (
                    (b := store.buffer(job_id)) is None or b.record.desired_state.value == "deleted"
                ),
                60,
                "Slurm's teardown to reach dac",
                every=0.1,
            )
        return took, answered
    finally:
        with contextlib.suppress(ProcessLookupError):  # a teardown may have killed it
            os.killpg(group, signal.SIGCONT)


def _saved_by_slurm(workdir: Path, job_id: str) -> bool:
    """burst_buffer/lua saves its buffers (name = job id, packed as Slurm's packstr: length
    with its NUL, big-endian, then the bytes) every 30 s only (AGENT_INTERVAL)."""
    path = workdir / "slurm" / "state" / "burst_buffer_lua_state"
    packed = struct.pack(">I", len(job_id) + 1) + job_id.encode() + b"\0"
    try:
        return packed in path.read_bytes()
    except FileNotFoundError:  # not saved yet, or between the unlink and link of a save
        return False


def _saved_at(path: Path) -> float:
    """mtime of a Slurm state file; 0 while it is missing. Slurm saves by writing NAME.new,
    unlinking NAME and linking NAME.new as NAME: seen (26.05), a stat in between that found
    no job_state."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _wait_until_slurm_saved(slurm, job_id: str) -> None:
    """Until slurmctld's state files hold the job as it is now and (lua) its buffer.
    slurmctld saves its jobs after an event, at most every 5 s (SAVE_MAX_WAIT,
    state_save.c), or every 300 s (PERIODIC_CHECKPOINT): a held job submitted here is such an
    event. burst_buffer/lua saves its buffers every 30 s (AGENT_INTERVAL), counted from the end
    of its last pass, which runs the pools hook and so drifts (seen: no save within 40 s after
    the fault tests before it); datawarp keeps none: at start it asks dac (show_sessions)."""
    workdir = Path(slurm.workdir)
    jobs = workdir / "slurm" / "state" / "job_state"
    since = time.time()
    held, r = slurm.sbatch("#!/bin/bash\n#SBATCH --hold\ntrue\n")
    assert held, r.stderr
    deadline = time.monotonic() + 75  # two of lua's saves: a pass comes late under load (seen)
    while _saved_at(jobs) < since or (
        slurm.plugin == "lua" and not _saved_by_slurm(workdir, job_id)
    ):
        assert time.monotonic() < deadline, "slurmctld never saved its state"
        time.sleep(0.2)
    slurm._run(["scancel", held])


def _release_once_slurm_tore_down(slurm, job_id: str, begin: float) -> bool:
    """The job deferred 60 s for the teardown: started now (StartTime=now, as an admin would)
    once Slurm lists no buffer of the job's, i.e. every teardown it queued for them is done.
    Not sooner: on 22.05 datawarp Slurm recovers a second record of the buffer (show_instances
    and show_sessions) and tears each down in turn, 5 s apart; a job released after the first
    met the second's end, which dropped its job record under the new setup ("unable to find
    bb_job record") and left the job pending (seen). If Slurm still lists one when the 60 s
    are nearly over, it starts the job itself. Whether the job was released early."""
    listed = re.compile(rf"^\s+(JobID|Name)={job_id} ", re.M)
    while time.time() < begin - 5:
        if not listed.search(slurm.scontrol("show", "burst")):
            r = slurm._run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"])
            assert r.returncode == 0, r.stderr
            return True
        time.sleep(0.5)
    return False


@pytest.mark.every_release
def test_slurmctld_restarted_during_stage_in_and_stage_out_loses_nothing(slurm):
    """slurmctld killed (-9) and started again during a job's stage-in, then during its
    stage-out. Slurm (both plugins, 22.05 to 26.05) does not know how far a stage-in got: it
    tears the buffer down (hurry) and defers the job 60 s, then sets it up and stages in
    again; at stage-out it runs post_run and data_out again, which dac finds already under way
    and waits for. The job completes, every staged-out byte is there once, nothing leaks."""
    from clitools import pools, revision

    data = Path(slurm.jobs) / "rdata"
    data.mkdir(mode=0o755, exist_ok=True)
    block = os.urandom(8 << 20)
    sums = {}
    for i in range(48):  # 384 MiB
        content = i.to_bytes(4, "big") + block[4:]
        (data / f"f{i:03}").write_bytes(content)
        sums[f"f{i:03}"] = hashlib.sha256(content).hexdigest()
    expected = hashlib.sha256(
        "".join(f"{v}  {k}\n" for k, v in sorted(sums.items())).encode()
    ).hexdigest()
    workdir = Path(slurm.workdir)
    store = Store.from_settings(load_config(str(workdir / "dac.yaml"), env={}).etcd)
    since = revision(store)
    job_id, r = slurm.sbatch(RESTART_JOB)
    assert job_id, r.stderr
    try:
        took = {}
        # 1. during the stage-in, once Slurm has saved both the job in staging-in and its buffer,
        # as for any stage-in longer than Slurm's saves (below)
        # `killed`: when slurmctld answered again, which Slurm's 60 s deferral counts from
        took["restart during stage-in"], killed = _restart_once_saved(
            slurm, store, job_id, "stage_in", since, until_torn_down=True
        )
        deadline = time.monotonic() + 60
        while store.buffer(job_id) is not None:  # Slurm's teardown (hurry): dac deletes it
            assert time.monotonic() < deadline, (store.buffer(job_id), slurm.logs())
            time.sleep(0.1)
        took["buffer torn down"] = time.time() - killed
        job = slurm.job(job_id)
        begin = time.mktime(time.strptime(job["EligibleTime"], "%Y-%m-%dT%H:%M:%S"))
        assert job["JobState"] == "PENDING" and begin >= killed + 50, (job, killed)
        early = _release_once_slurm_tore_down(slurm, job_id, begin)
        since = revision(store)
        # 2. during the stage-out (the stage-in ran again, on a new buffer), once Slurm has
        # saved the job's end: a kill within 5 s of it left the job RUNNING for good (seen)
        took["restart during stage-out"], _ = _restart_once_saved(
            slurm, store, job_id, "stage_out", since
        )
        job = slurm.wait(job_id, timeout=180)
        assert job["JobState"] == "COMPLETED", (job, slurm.logs(60))
        with open(f"{slurm.jobs}/out-{job_id}.txt") as f:
            assert f.read().split()[0] == expected  # the job saw every byte staged in
        out = Path(slurm.jobs) / "rout"
        assert {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir()
        } == sums  # every byte staged out, nothing partial or extra
        dacd_log = "".join(p.read_text(errors="replace") for p in (workdir / "logs").glob("dacd-*"))
        stages = {
            s: dacd_log.count(f"buffer {job_id} (job {job_id}): {s} on ")
            for s in ("stage_in", "stage_out", "delete")
        }
        # stage-in: cut short by Slurm's teardown, then once on the new buffer; stage-out once
        assert stages == {"stage_in": 2, "stage_out": 1, "delete": 2}, stages
        assert (
            f"buffer {job_id} (job {job_id}): stage_in stopped: the buffer is being torn "
            "down" in dacd_log
        )
        assert store.buffer(job_id) is None
        assert pools(slurm.env)["default"]["free_bricks"] == 8
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        assert not [m for m in mounts if m.startswith(f"{workdir}/") and job_id in Path(m).parts]
        print(
            f"\nslurmctld restarts: {', '.join(f'{k} {v:.1f}s' for k, v in took.items())}; "
            f"released {'early' if early else 'by Slurm after its 60 s'}"
        )
    except AssertionError as e:  # what Slurm and dac said, since the workdir goes
        raise AssertionError(f"{e}\n{slurm.logs(80)}") from None
    finally:  # a job left behind must not hold the next tests' nodes and bricks
        slurm._run(["scancel", job_id])
