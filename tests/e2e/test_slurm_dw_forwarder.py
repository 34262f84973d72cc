"""dac's datawarp forwarder (issue 34) under a real slurmctld, burst_buffer/datawarp: GetSysState
is slurm-plugin/dw_wlm_cli.lua, which slurmctld forks for every call; job_process, pools and
paths are answered by dac's answerer over its socket (the answerer's stats count them), every
other function runs dacctl with the same arguments, and jobs run as with dacctl itself; on
22.05, 24.11 and 26.05 (the chroots have lua5.1 and lua-socket, daclocal/releases.py)."""

import json
import re
from pathlib import Path

import pytest

from daccore.share import asset
from dacservice.answerer.wire import ask

JOB = """#!/bin/bash
#SBATCH -o @JOBS@/out-%j.txt
#DW jobdw capacity=512MiB access_mode=striped type=scratch pool=default
echo "buffer $DW_JOB_STRIPED"
"""
HOT = ("job_process", "pools", "paths")


def _stats(slurm) -> dict:
    sock = Path(slurm.workdir) / "slurm" / "answerer" / "socket"
    kind, rc, body, _ = ask(str(sock), "stats", [])
    assert (kind, rc) == ("ANSWER", 0), body
    return json.loads(body)


def _answered(before: dict, after: dict, function: str) -> int:
    return sum(
        after.get(f"{function}:{s}", 0) - before.get(f"{function}:{s}", 0)
        for s in ("mirror", "etcd")
    )


@pytest.mark.every_release
@pytest.mark.datawarp_only
def test_datawarp_forks_the_forwarder_and_the_answerer_answers_the_hot_calls(slurm):
    etc = Path(slurm.workdir) / "slurm" / "etc"
    conf = (etc / "burst_buffer.conf").read_text()
    (sys_state,) = re.findall(r"^GetSysState=(.*)$", conf, re.M)
    assert Path(sys_state) == etc / "dw_wlm_cli"
    assert Path(sys_state).read_bytes() == asset("slurm", "dw_wlm_cli.lua").read_bytes()
    log = Path(slurm.workdir) / "slurm" / "log" / "dacctl.log"
    passed_over = log.read_text().count("dac_wlm_cli:") if log.exists() else 0
    before = _stats(slurm)
    ids = []
    for _ in range(3):
        job_id, r = slurm.sbatch(JOB)
        assert job_id, r.stderr
        ids.append(job_id)
    refused = slurm.sbatch("#!/bin/bash\n#DW jobdw capacity=1GiB pool=default acces=striped\n")
    assert refused[0] is None and "unknown key 'acces'" in refused[1].stderr
    for job_id in ids:  # setup, data_in, pre_run, post_run, data_out, teardown: dacctl
        job = slurm.wait(job_id, timeout=180)
        assert job["JobState"] == "COMPLETED", (job, slurm.logs())
        with open(f"{slurm.jobs}/out-{job_id}.txt") as f:  # paths' answer, as the job saw it
            assert f.read().strip() == f"buffer {slurm.workdir}/mnt/{job_id}/striped"
    after = _stats(slurm)
    # each sbatch's job_process (the refused one too) and each job's paths were forwarded;
    # pools since slurmctld started
    assert _answered(before, after, "job_process") >= 4, (before, after)
    assert _answered(before, after, "paths") >= 3, (before, after)
    assert _answered({}, after, "pools") >= 1, after
    assert not any(after.get(f"{f}:refused", 0) for f in HOT), after
    now = log.read_text().count("dac_wlm_cli:") if log.exists() else 0
    assert now == passed_over, slurm.logs()  # no hot call fell back to dacctl


@pytest.mark.every_release
@pytest.mark.datawarp_only
def test_datawarp_runs_the_dwstat_forwarder_and_the_answerer_answers_bbstat(slurm):
    """GetSysStatus is slurm-plugin/dwstat.lua (issue 45): `scontrol show dwstat` and `show
    bbstat` are answered by the answerer (its bbstat counters), dac-bbstat's own text, and
    nothing falls back to dac-bbstat."""
    etc = Path(slurm.workdir) / "slurm" / "etc"
    conf = (etc / "burst_buffer.conf").read_text()
    (sys_status,) = re.findall(r"^GetSysStatus=(.*)$", conf, re.M)
    assert Path(sys_status) == etc / "dwstat"
    assert Path(sys_status).read_bytes() == asset("slurm", "dwstat.lua").read_bytes()
    log = Path(slurm.workdir) / "slurm" / "log" / "dacctl.log"
    passed_over = log.read_text().count("dac_dwstat:") if log.exists() else 0
    before = _stats(slurm)
    assert slurm.scontrol("show", "dwstat").split()[:3] == ["pool", "units", "quantity"]
    sessions = slurm.scontrol("show", "dwstat", "sessions").split()[:2]
    assert sessions in (["sess", "state"], ["no", "sessions"]), sessions
    assert slurm.scontrol("show", "bbstat", "hosts").startswith("dac-bbstat: usage:")
    after = _stats(slurm)
    assert _answered(before, after, "bbstat") == 3, (before, after)
    now = log.read_text().count("dac_dwstat:") if log.exists() else 0
    assert now == passed_over, slurm.logs()
