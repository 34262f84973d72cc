"""Slurm's view of the pool is dac's (issue 45, item 5: burst_buffer/datawarp counted each
persistent buffer made with `dacctl create-persistent` at the bytes of every buffer, and kept
counting it after dac destroyed it, so jobs pended while dac had room). After each kind of
create and destroy, and across slurmctld restarts, `scontrol show burst` is compared with
`dacctl pools` and dac's buffers:

- burst_buffer/datawarp: UsedSpace, FreeSpace and the buffers Slurm lists (job buffers by job
  id, persistent ones by name, each at its size) are dac's, whoever made the buffer. Slurm
  learns of a buffer made outside it at its first pass of dac's list (every 30 s) once the
  buffer is OtherTimeout old, and drops one dac no longer lists a minute after it last saw it.
- burst_buffer/lua: FreeSpace is dac's (the pools hook's `free`, every 30 s); UsedSpace and the
  list are the jobs' buffers only, as Slurm claims them: a lua plugin has no way to learn of a
  buffer no job of its asked for (docs/slurm.md, What Slurm counts).

The accounting code is the same in 22.05, 24.11 and Slurm's newest (`_load_state`,
`_timeout_bb_rec`, the JSON parsers; lua's `_load_pools`): the host's 22.05 runs this."""

import json
import re
import time
from pathlib import Path

from clitools import pools, run

from daccore.units import parse_size
from daclocal.cluster import restart_slurmctld
from daclocal.slurm import SUBMIT_USER

#: 60 s OtherTimeout (burst_buffer/datawarp's wait before it counts a buffer it did not make)
#: or a minute unseen (before it drops one), plus two of its 30 s passes, on a loaded machine
CATCH_UP = 240

RUNNING_JOB = """#!/bin/bash
#SBATCH -o @JOBS@/out-%j.txt
#DW jobdw capacity=100MiB access_mode=striped type=scratch pool=default
while [ ! -e @JOBS@/go-@TAG@ ]; do sleep 0.5; done
"""


def _slurm_view(slurm) -> tuple[int, int, dict[str, int]]:
    """(UsedSpace, FreeSpace, buffer -> size) of pool `default` in `scontrol show burst`: the
    first line under datawarp (its DefaultPool), the pool's own line under lua."""
    out = slurm.scontrol("show", "burst")
    head = (
        r"Name=datawarp DefaultPool=default"
        if slurm.plugin == "datawarp"
        else r"PoolName\[\d+\]=default"
    )
    line = re.search(rf"^[ \t]*{head} .*$", out, re.M)
    assert line, out
    used, free = (re.search(rf"\b{k}=(\S+)", line[0]) for k in ("UsedSpace", "FreeSpace"))
    assert used and free, out
    listed = re.findall(r"^[ \t]+(?:JobID|Name)=(\S+) .*\bSize=(\S+)", out, re.M)
    return parse_size(used[1]), parse_size(free[1]), {n: parse_size(s) for n, s in listed}


def _expected(slurm) -> tuple[int, int, dict[str, int]]:
    """What Slurm should show, from `dacctl pools` and dac's buffers."""
    pool = pools(slurm.env)["default"]
    rows = json.loads(run("dacctl", "buffers", "--json", env=slurm.env).stdout)["buffers"]
    buffers = {b["name"]: b["size"] for b in rows}
    if slurm.plugin == "lua":  # only its jobs' buffers: persistent ones are in FreeSpace alone
        buffers = {n: size for n, size in buffers.items() if n.isdigit()}
        return sum(buffers.values()), pool["free_bytes"], buffers
    return pool["used_bytes"], pool["free_bytes"], buffers


def _agree(slurm, what: str, timeout: float = CATCH_UP) -> None:
    """Until Slurm's view is dac's, for `timeout` seconds; then both, and the logs."""
    deadline = time.monotonic() + timeout
    while (seen := _slurm_view(slurm)) != (want := _expected(slurm)):
        assert time.monotonic() < deadline, (
            f"after {what}: Slurm {seen}, dac {want}\n"
            f"{slurm.scontrol('show', 'burst')}\n{slurm.logs(30)}"
        )
        time.sleep(2)


def _restarted(slurm, what: str) -> None:
    """slurmctld started again: its view, read from its saved state and dac's list at start,
    is dac's at once (no buffer dac destroyed comes back, each at its own size)."""
    restart_slurmctld(Path(slurm.workdir))
    deadline = time.monotonic() + 30  # until it has asked for the pools (lua: its first pass)
    while "TotalSpace=4GiB" not in slurm.scontrol("show", "burst"):
        assert time.monotonic() < deadline, slurm.logs()
        time.sleep(0.5)
    assert _slurm_view(slurm) == _expected(slurm), (what, slurm.scontrol("show", "burst"))


def _user_dacctl(slurm, *args: str) -> None:
    """`dacctl *args` as the submit user: through the user service, as any user runs it."""
    r = slurm._run(["runuser", "-u", SUBMIT_USER, "--", f"{slurm.workdir}/bin/dacctl", *args])
    assert r.returncode == 0, r.stderr


def _job(slurm, script: str) -> str:
    job_id, r = slurm.sbatch(script)
    assert job_id, r.stderr
    return job_id


def _completed(slurm, script: str) -> None:
    job = slurm.wait(_job(slurm, script), timeout=120)
    assert job["JobState"] == "COMPLETED", (job, slurm.logs())


def test_slurm_counts_every_buffer_dac_holds_at_its_size_until_dac_destroys_it(slurm):
    """Three persistent buffers of two owners (each within its 1GiB share) and a job's buffer,
    of different sizes, so one counted at another's bytes shows."""
    tag = slurm.plugin
    by_root, by_user, by_job = f"root{tag}", f"user{tag}", f"job{tag}"
    _agree(slurm, "nothing made yet")
    # made outside Slurm: by root (an admin) for another owner, and by the user through the
    # user service
    run(
        "dacctl",
        "create-persistent",
        "--name",
        by_root,
        "--capacity",
        "1GiB",
        "--user",
        "4242",
        "--group",
        "4242",
        env=slurm.env,
    )
    _user_dacctl(slurm, "create-persistent", "--name", by_user, "--capacity", "512MiB")
    _agree(slurm, "dacctl create-persistent by root and by the user")
    if slurm.plugin == "datawarp":  # burst_buffer/lua runs no create_persistent line
        _completed(
            slurm,
            f"#!/bin/bash\n#BB create_persistent name={by_job} capacity=512MiB "
            "access=striped type=scratch\ntrue\n",
        )
        _agree(slurm, "#BB create_persistent")
    _restarted(slurm, "a restart with persistent buffers")
    running = _job(slurm, RUNNING_JOB.replace("@TAG@", tag))
    try:
        deadline = time.monotonic() + 120
        while slurm.job(running).get("JobState") != "RUNNING":
            assert time.monotonic() < deadline, (slurm.job(running), slurm.logs())
            time.sleep(0.5)
        _agree(slurm, "a job's jobdw")
        run("dacctl", "destroy-persistent", by_root, env=slurm.env, timeout=120)
        _user_dacctl(slurm, "destroy-persistent", by_user)
        _agree(slurm, "dacctl destroy-persistent by root and by the user")
        if slurm.plugin == "datawarp":
            _completed(slurm, f"#!/bin/bash\n#BB destroy_persistent name={by_job}\ntrue\n")
            _agree(slurm, "#BB destroy_persistent")
    finally:
        Path(slurm.jobs, f"go-{tag}").touch()
    job = slurm.wait(running, timeout=120)
    assert job["JobState"] == "COMPLETED", (job, slurm.logs())
    _agree(slurm, "the job's end")
    assert _slurm_view(slurm) == (0, 4 << 30, {})
    _restarted(slurm, "a restart after every buffer was destroyed")
