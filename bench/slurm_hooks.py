"""Budget (issue 34): slurmctld's own timing of the Lua hooks it runs in-process under
burst_buffer/lua with dac's answerer, job_process, paths and pools: median <= 1 ms, p99 <= 5 ms,
as Slurm itself reports them (bench/hot_path.py times the same calls inside Lua, outside Slurm).

With DebugFlags=BurstBuffer at SlurmctldDebug=verbose (`scontrol setdebug verbose`: the local
DAC logs at info), burst_buffer/lua logs each call's time in microseconds (TIMING below). JOBS
burst-buffer jobs are submitted held (a job_process each), RUN of them (all) released and run
to the end (a paths each); pools is called every 30 s on Slurm's own schedule: the bench waits for
POOLS of them. All are cancelled after.

    .venv/bin/python bench/slurm_hooks.py [--slurm-release 22.05|24.11|26.05] [--probes]
                                          [--distinct] [--site] [--floor-paths]

The JOBS scripts are one script, as a workflow submits it, so after the first the answerer
gives job_process its kept answer (dacservice/answerer/answers.py, VALID_KEPT); `--distinct`
ends each in a comment of its own, so every job_process is answered afresh.

`--probes` also splits the job_process calls of the storm into their parts (a fresh Lua state,
burst_buffer.lua compiled, Slurm's `slurm` table, the chunk, the hook, lua-socket's dlopen, the
close) with uprobes in slurmctld (bench/lua_probes.py; needs perf, Debian's linux-perf, which
`make deps` does not install): about 0.05 ms a call more.

`--site`: the local DAC's dacd processes (its storage servers and compute nodes, and the
playbooks they run) at SCHED_IDLE, as if on other hosts: a site's controller runs slurmctld and
the hooks' forks, not the filesystems' builds and mounts, which on this one machine share its
two cores with slurmctld as the jobs start.

`--floor-paths`: burst_buffer.lua's `slurm_bb_paths` replaced by one that returns success at
once (no file read, none written; the jobs' DW_* variables go unset, which their script does
not need), the rest dac's: what slurmctld's timing of paths is with nothing of dac's in it,
under the same job starts, Slurm's own floor (its job record packed and unpacked on 24.11+, a
Lua state made, loaded and closed).

Needs root (a local DAC with that release's Slurm, 2 nodes).
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import local_dac, p99, slurm_release, steal_meter  # noqa: E402
from lua_probes import recorded  # noqa: E402
from sbatch_storm import Submitter, conditions  # noqa: E402

JOBS = 100
#: jobs released and run (a paths each): all of them, so that paths' p99 is one of 100 calls,
#: not the slowest of a few; 8 bricks run them in waves, each start among the others' setups,
#: pre_runs and teardowns
RUN = 100
#: slurmctld calls pools every 30 s: this many samples of it (the bench waits for them)
POOLS = 3
MEDIAN_MS, P99_MS = 1.0, 5.0
HOOKS = ("slurm_bb_job_process", "slurm_bb_paths", "slurm_bb_pools")
#: burst_buffer_lua.c's line after each Lua call (END_TIMER's TIME_STR is "usec=N"); 22.05:
#: "slurm_bb_job_process ran for usec=N", 24.11 and 26.05 "... for JobId=N ran for usec=N"
TIMING = re.compile(r"(slurm_bb_\w+)(?: for (?:job )?JobId=\S+)? ran for usec=(\d+)")
JOB = """#!/bin/bash
#DW jobdw capacity=512MiB access_mode=striped type=scratch pool=default
echo "$DW_JOB_STRIPED"
"""


def timings(log: str) -> dict[str, list[float]]:
    """Each hook's reported times in `log`, in ms."""
    out: dict[str, list[float]] = {h: [] for h in HOOKS}
    for hook, usec in TIMING.findall(log):
        out.setdefault(hook, []).append(int(usec) / 1000)
    return out


def idle_class(pids: list[int]) -> int:
    """Every thread of `pids` put in SCHED_IDLE (their children inherit it); how many."""
    n = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.sched_setscheduler(int(tid), os.SCHED_IDLE, os.sched_param(0))
            n += 1
    return n


def floor_paths(script: Path) -> None:
    """`--floor-paths`: dac's burst_buffer.lua with a slurm_bb_paths answering nothing, compiled
    as the local DAC installs it (Slurm loads the file afresh at every call)."""
    from daccore.share import asset
    from dacctl.slurm_files import LUA_SCRIPT, lua_bytecode_of
    from daclocal.slurm import lua_bytecode_default

    source = asset("slurm", LUA_SCRIPT).read_text()
    source += '\nfunction slurm_bb_paths(...)\n\treturn slurm.SUCCESS, ""\nend\n'
    data = source.encode()
    if lua_bytecode_default():
        data = lua_bytecode_of(data, f"@{script}", "lua5.1")
    script.write_bytes(data)


def main() -> int:
    if {"-h", "--help"} & set(sys.argv[1:]):  # a whole run takes minutes: not for a typo
        print(__doc__)
        return 0
    rel = slurm_release(sys.argv) or "22.05"
    distinct = "--distinct" in sys.argv
    with local_dac(servers=2, bricks_per_server=4, release=rel) as (state, _env, work):
        sub = Submitter(state, work)
        if "--site" in sys.argv:
            n = idle_class([d["pid"] for d in state.dacd])
            print(f"--site: {len(state.dacd)} dacd ({n} threads) at SCHED_IDLE")
        if "--floor-paths" in sys.argv:
            floor_paths(sub.cluster.conf.parent / "burst_buffer.lua")
        r = sub.run("scontrol", "setdebug", "verbose", as_user=False)
        assert r.returncode == 0, r.stderr
        log = Path(state.workdir) / "slurm" / "log" / "slurmctld.log"
        mark = log.stat().st_size
        cpu, load = steal_meter(), conditions()
        probes: list[str] = []
        if "--probes" in sys.argv:
            with recorded(state.slurm["pids"]["slurmctld"]) as probes:
                sub.storm(JOB, JOBS, "hooks", distinct)
        else:
            sub.storm(JOB, JOBS, "hooks", distinct)
        ids = sub.run("squeue", "-h", "-o", "%i", "-u", sub.user.pw_name, as_user=False)
        running = sorted(ids.stdout.split(), key=int)[:RUN]
        sub.run("scontrol", "release", ",".join(running), as_user=False)
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            left = sub.run(
                "squeue", "-h", "-t", "PD,CF,R,CG", "-j", ",".join(running), as_user=False
            ).stdout
            if not left.strip():
                break
            time.sleep(1)
        deadline = time.monotonic() + 100
        while True:  # pools: every 30 s on Slurm's own schedule
            with open(log, errors="replace") as f:
                f.seek(mark)
                text = f.read()
            got = timings(text)
            if len(got["slurm_bb_pools"]) >= POOLS or time.monotonic() > deadline:
                break
            time.sleep(2)
        seen = f"{load}, {cpu()}"
        from dacservice.answerer.wire import ask

        sock = Path(state.workdir) / "slurm" / "answerer" / "socket"
        answered = ask(str(sock), "stats", [])  # where each answer came from
        kept = Path(f"/tmp/slurm_hooks-{rel}.slurmctld.log")  # the workdir goes with the DAC
        kept.write_text(text)
        sub.cancel_all()
    scripts = "a distinct script each" if distinct else "one script"
    if "--site" in sys.argv:
        scripts += "; dacd at SCHED_IDLE"
    if "--floor-paths" in sys.argv:
        scripts += "; paths answering nothing (Slurm's floor)"
    print(f"Slurm {rel}: slurmctld's own timing of each in-process Lua call ({scripts}; {seen})")
    print(f"slurmctld's log of the run: {kept}")
    failed = 0
    for hook in HOOKS:
        ms = got.get(hook, [])
        if not ms:
            print(f"{hook:22} no timing logged: FAIL")
            failed = 1
            continue
        med, top = statistics.median(ms), p99(ms)
        ok = med <= MEDIAN_MS and top <= P99_MS
        failed |= not ok
        print(
            f"{hook:22} n={len(ms):4} median {med:6.3f} ms p99 {top:6.3f} ms max {max(ms):6.3f} ms"
            f" (budget {MEDIAN_MS:.0f} / {P99_MS:.0f} ms): {'PASS' if ok else 'FAIL'}"
        )
    print(f"the answerer's counters: {answered[2] if answered[0] == 'ANSWER' else answered}")
    for line in probes:
        print(line)
    for hook in sorted(set(got) - set(HOOKS)):
        print(f"{hook:22} n={len(got[hook]):4} median {statistics.median(got[hook]):6.3f} ms")
    return failed


if __name__ == "__main__":
    sys.exit(main())
