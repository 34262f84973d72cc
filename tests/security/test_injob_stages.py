"""Stages a running job asks for (issue 36), against a real Slurm, munged, dac's user service
and dacd, with two real users: A (Slurm's submit user, whose job runs) and B (5678:8765).

From inside its job A stages a checkpoint out, and tries what it must not: another user's
directory as destination, another user's file as source, another job's buffer, a forged job
id, a node not the job's, a FIFO. Meanwhile B asks for stages on A's job and reads and
cancels A's stages. Once the job has ended, A asks again. Only A's own stage of its own
data runs, as A; everything else is refused in one line or fails as A's copier, with
nothing written where A may not write."""

import os
import subprocess
import time
from pathlib import Path

import pytest
from security.injob_client import client_argv, reply, shell
from security.sbatch_dac import sbatch, slurm_dac

from daclocal.slurm import PLUGINS, ensure_submit_user

B = (5678, 8765)
CKPT = 8 << 20


@pytest.fixture(scope="module", params=PLUGINS)
def site(request):
    yield from slurm_dac(request.param, "injob")


def _as(uid_gid, argv, env):
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        user=uid_gid[0],
        group=uid_gid[1],
        extra_groups=[uid_gid[1]],
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "DAC_CONFIG": env["DAC_CONFIG"]},
    )


def _wait_for(path: Path, seconds: float, job: str, env) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            state = subprocess.run(
                ["scontrol", "show", "job", job],
                capture_output=True,
                text=True,
                env={**os.environ, **env},
            ).stdout
            raise AssertionError(f"{path} not written in {seconds:.0f}s: {state}")
        time.sleep(0.5)


def _gone(job: str, env, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        r = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%T"],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
        )
        if not r.stdout.strip():
            return
        time.sleep(1)
    raise AssertionError(f"job {job} still in the queue after {seconds:.0f}s")


def test_a_job_stages_its_own_data_out_as_its_user_and_nothing_else(site, tmp_path):
    env, jobs, _ = site
    workdir = Path(env["DAC_CONFIG"]).parent
    a = ensure_submit_user()
    out = Path(jobs) / "out"
    out.mkdir()
    os.chown(out, a.pw_uid, a.pw_gid)
    b_dir = Path(jobs) / "b-private"  # B's: 0700, a secret in it
    b_dir.mkdir(mode=0o700)
    (b_dir / "secret").write_bytes(b"B's secret")
    os.chown(b_dir / "secret", *B)
    os.chown(b_dir, *B)
    client = Path(jobs) / "client"
    client.write_text(f'#!/bin/sh\nexec {shell(client_argv(workdir))} "$@"\n')
    client.chmod(0o755)
    body = f"""#DW jobdw capacity=512MiB access_mode=striped type=scratch pool=default
C="{client}"
J=@J@
S=$DW_JOB_STRIPED
ask() {{ # NAME JOB NODE DIRECTION SOURCE DESTINATION
  $C stage-start job=$2 node=$3 type=file direction=$4 source=$5 destination=$6 > $J/$1.json
}}
head -c {CKPT} /dev/urandom > $S/ckpt.1
mkfifo $S/fifo
ask ok $SLURM_JOB_ID $SLURMD_NODENAME out $S/ckpt.1 $J/out/ckpt.1
ask b-dest $SLURM_JOB_ID $SLURMD_NODENAME out $S/ckpt.1 $J/b-private/stolen
ask b-src $SLURM_JOB_ID $SLURMD_NODENAME in $J/b-private/secret $S/stolen
ask fifo $SLURM_JOB_ID $SLURMD_NODENAME out $S/fifo $J/out/fifo
ask other-buffer $SLURM_JOB_ID $SLURMD_NODENAME out ${{S%/*/striped}}/1$SLURM_JOB_ID/striped/x $J/x
ask forged 99999 $SLURMD_NODENAME out $S/ckpt.1 $J/out/f
ask node $SLURM_JOB_ID node9 out $S/ckpt.1 $J/out/n
$C stage-wait job=$SLURM_JOB_ID timeout=30 > $J/wait.json
cmp $S/ckpt.1 $J/out/ckpt.1 && echo same > $J/cmp.txt
touch $J/ready
sleep 30
""".replace("@J@", jobs)
    job, r = sbatch(env, jobs, body)
    log = workdir / "slurm" / "log" / "dacctl.log"
    assert job, (r.stderr, log.read_text()[-3000:] if log.exists() else "")
    _wait_for(Path(jobs) / "ready", 120, job, env)
    assert (Path(jobs) / "ok.json").read_text(), (Path(jobs) / f"slurm-{job}.out").read_text()
    read = {
        n: reply((Path(jobs) / f"{n}.json").read_text())
        for n in ("ok", "b-dest", "b-src", "fifo", "other-buffer", "forged", "node", "wait")
    }
    assert read["ok"].get("ok", {}).get("state") == "queued", read
    assert "not in this job's buffer" in read["other-buffer"]["error"]
    for name in ("forged", "node"):
        assert read[name]["error"].startswith("no running job"), read[name]
    done = {s["destination"].rsplit("/", 1)[1]: s for s in read["wait"]["ok"]["stages"]}
    assert read["wait"]["ok"]["done"] is True
    assert (done["ckpt.1"]["state"], done["ckpt.1"]["bytes_done"]) == ("done", CKPT)
    assert done["stolen"]["state"] == "failed" and "Permission denied" in done["stolen"]["error"]
    assert done["fifo"]["state"] == "failed" and "not a regular file" in done["fifo"]["error"]
    src = [s for s in read["wait"]["ok"]["stages"] if s["direction"] == "in"][0]
    assert src["state"] == "failed" and "Permission denied" in src["error"]
    assert (Path(jobs) / "cmp.txt").read_text().strip() == "same"
    st = (out / "ckpt.1").stat()
    assert (st.st_uid, st.st_gid, st.st_size) == (a.pw_uid, a.pw_gid, CKPT)
    assert sorted(p.name for p in b_dir.iterdir()) == ["secret"]

    # B, on the same machine (the local DAC's nodes share its address), at A's running job
    client_argv_ = client_argv(workdir)
    asks = {
        "start": [
            "stage-start",
            f"job={job}",
            "node=node1",
            "type=file",
            "direction=out",
            f"source={workdir}/mnt/{job}/striped/ckpt.1",
            f"destination={jobs}/b-got",
        ],
        "list": ["stage-list", f"job={job}"],
        "status": ["stage-status", f"job={job}", "id=1"],
        "cancel": ["stage-cancel", f"job={job}", "id=1"],
        "wait": ["stage-wait", f"job={job}", "timeout=0"],
    }
    for what, words in asks.items():
        r = _as(B, client_argv_ + words, env)
        assert r.returncode == 1 and reply(r.stdout)["error"].startswith("no "), (what, r)
    assert not (Path(jobs) / "b-got").exists()

    # A again, once the job has ended: its buffer torn down, nothing more is taken
    _gone(job, env)
    r = _as((a.pw_uid, a.pw_gid), client_argv_ + asks["start"], env)
    assert r.returncode == 1 and reply(r.stdout)["error"].startswith("no running job"), r
    r = _as((a.pw_uid, a.pw_gid), client_argv_ + asks["list"], env)
    # its stages went at its teardown: none, or no job at all once the buffer is gone too
    assert reply(r.stdout) == {"ok": {"stages": []}} or r.returncode == 1, r
