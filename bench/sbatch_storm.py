"""Budget (issue 34): 1,000 `sbatch` of burst-buffer jobs in a row through a real Slurm with dac
(burst_buffer/lua, dac's answerer) submit at >= 90 % of the rate of the same Slurm with no burst
buffer plugin and the same jobs without their #DW lines. Submission alone is measured: every job
is held (`sbatch --hold`, so none is scheduled, staged or run) and all are cancelled after each
run (a held burst-buffer job was never set up: its cancel runs no teardown). For reference, the
same 1,000 with the answerer stopped, where every job_process forks dacctl (the fallback's path,
as DAC_LOCAL_ANSWERER=0 runs it).

    .venv/bin/python bench/sbatch_storm.py [--slurm-release 22.05|24.11|26.05] [--jobs N]
        [--rounds K] [--cpu] [--floor]

Each run's line also says slurmctld's own median time per submission (its RPC handler, the
hooks included, as it logs it) and how many job_process calls reached the answerer's socket
(the rest read a valid file). `--cpu`: after each run, the processes that used the most CPU,
in ms per submission, read from /proc before and after.

`--floor`: also the same #DW jobs through burst_buffer/lua with a stand-in burst_buffer.lua
whose every hook returns success at once (FLOOR_LUA: no socket, no file, no fork): what Slurm's
burst_buffer/lua costs a submission by itself (a fresh Lua state per call, the job's record
packed and pushed to it on 24.11+), which no script can win back; dac's own share is the
difference between its rate and the floor's.

Runs in one local DAC (2 servers, 2 Slurm nodes; needs root): first the answerer stopped (the
fallback, once), then ROUNDS rounds (`--rounds`) of dac, no burst buffer (slurm.conf without
BurstBufferType) and the floor, each kind in each place of a round in turn, every run on a
slurmctld just restarted on its saved state with that configuration. Each kind's rate is the
mean of its rounds: single A-B-A runs of 1,000 swung 0.80-1.15x with nothing changed, as the
load of a shared two-core machine drifts.
Each sbatch runs as the local DAC's submit user, straight from this process (no runuser).
"""

from __future__ import annotations

import os
import pwd
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import local_dac, p99, slurm_release, steal_meter  # noqa: E402

JOBS = 1000
#: dac's rate at least this share of no burst buffer's
RATIO = 0.9
#: rounds of every kind of run, each kind in each place in turn; the rates are their means
ROUNDS = 3
DW = """#!/bin/bash
#SBATCH -t 10
#DW jobdw capacity=512MiB access_mode=striped type=scratch pool=default
#DW stage_in type=directory source=/tmp/in destination=$DW_JOB_STRIPED/in
srun hostname
"""


#: `--floor`'s pools: the local DAC's (2 servers x 4 bricks of 1 GiB), as dac answers them
POOLS = (
    '{"pools": [{"id": "default", "units": "bytes", "granularity": 1073741824, '
    '"quantity": 8, "free": 8}]}'
)
#: `--floor`'s burst_buffer.lua: every hook any release requires, each answering success at once
FLOOR_LUA = "".join(
    f"function slurm_bb_{name}(...)\n\treturn slurm.SUCCESS, {answer}\nend\n"
    for name, answer in (
        ("job_process", '""'),
        ("pools", "'" + POOLS + "'"),
        ("job_teardown", '""'),
        ("setup", '""'),
        ("data_in", '""'),
        ("test_data_in", '""'),
        ("real_size", '""'),
        ("paths", '""'),
        ("pre_run", '""'),
        ("post_run", '""'),
        ("data_out", '""'),
        ("test_data_out", '""'),
        ("get_status", '""'),
    )
)


def cpu_by_process() -> dict[tuple[str, str], int]:
    """{(pid, name): clock ticks of CPU so far} of every process (`--cpu`); a Python process is
    named by its first arguments (dac-answerer, dacd)."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        if name.startswith("python"):
            name = " ".join(os.path.basename(a.decode(errors="replace")) for a in argv[1:3])
        out[(pid, name)] = int(fields[11]) + int(fields[12])  # utime + stime
    return out


def cpu_per_job(before: dict[tuple[str, str], int], jobs: int, top: int = 6) -> str:
    """The processes that used the most CPU since `before`, in ms per submission."""
    used: dict[str, int] = {}
    earlier = {pid: ticks for (pid, _), ticks in before.items()}  # a kworker's name changes
    for (pid, name), ticks in cpu_by_process().items():
        name = "kworker" if name.startswith("kworker/") else name
        used[name] = used.get(name, 0) + ticks - earlier.get(pid, 0)
    per = 1000 / os.sysconf("SC_CLK_TCK") / jobs
    most = sorted(used.items(), key=lambda kv: -kv[1])[:top]
    return "CPU a submission: " + ", ".join(f"{n} {t * per:.2f} ms" for n, t in most if t)


_SUBMITTED = re.compile(r"_slurm_rpc_submit_batch_job: JobId=\d+ .*?usec=(\d+)")


def without_dw(script: str) -> str:
    return "".join(line for line in script.splitlines(True) if not line.startswith("#DW"))


class Submitter:
    """Runs the local DAC's release of sbatch, scancel and scontrol as its submit user."""

    def __init__(self, state, work: Path):
        from daclocal.slurm import SUBMIT_USER, SlurmCluster

        self.cluster = SlurmCluster(
            Path(state.workdir),
            state.slurm["nodes"],
            release=state.slurm.get("release", "22.05"),
        )
        self.user = pwd.getpwnam(SUBMIT_USER)
        self.work = work
        path = os.environ.get("PATH", "/usr/bin:/bin")
        if self.cluster.bindir:
            path = f"{self.cluster.bindir}:{path}"
        self.env = {"PATH": path, "SLURM_CONF": str(self.cluster.conf), "HOME": str(work)}
        self.log = Path(state.workdir) / "slurm" / "log" / "slurmctld.log"

    def run(self, *argv: str, as_user: bool = True) -> subprocess.CompletedProcess[str]:
        uid, gid = (self.user.pw_uid, self.user.pw_gid) if as_user else (None, None)
        return subprocess.run(
            [self.cluster.client(argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.work,
            timeout=60,
            user=uid,
            group=gid,
            extra_groups=[] if as_user else None,
        )

    def handled(self, since: int) -> str:
        """slurmctld's own time for each submission logged after byte `since` of its log
        (`_slurm_rpc_submit_batch_job: JobId=N ... usec=U`, at info): the RPC handler under
        its locks, the burst-buffer hooks included; the rest of a submission is sbatch's own
        start, its RPC's way and munge."""
        with open(self.log, errors="replace") as f:
            f.seek(since)
            usecs = [int(u) for u in _SUBMITTED.findall(f.read())]
        if not usecs:
            return "slurmctld logged no submission time"
        return f"slurmctld's handler median {statistics.median(usecs) / 1000:.2f} ms"

    def storm(
        self, script: str, jobs: int, label: str, distinct: bool = False
    ) -> tuple[float, list[float]]:
        """`jobs` held submissions of `script` in a row: (seconds in all, each one's ms). With
        `--cpu`, each process's CPU per submission is printed after the run (sbatch's own, a
        child that has exited, is not among them). `distinct`: each submission's script ends
        in a comment of its own (no two alike, as hand-written scripts are)."""
        before = cpu_by_process() if "--cpu" in sys.argv and jobs >= 100 else None
        try:
            return self._storm(script, jobs, label, distinct)
        finally:
            if before is not None:
                print(f"  {label}: {cpu_per_job(before, jobs)}")

    def _storm(
        self, script: str, jobs: int, label: str, distinct: bool
    ) -> tuple[float, list[float]]:
        path = self.work / f"{label}.sh"
        path.write_text(script)
        path.chmod(0o644)
        each: list[float] = []
        start = time.perf_counter()
        for n in range(jobs):
            if distinct:
                path.write_text(f"{script}# submission {n}\n")
            t = time.perf_counter()
            r = self.run("sbatch", "--parsable", "--hold", "-o", "/dev/null", str(path))
            each.append((time.perf_counter() - t) * 1000)
            if r.returncode != 0:
                raise SystemExit(f"{label}: sbatch failed: {r.stderr.strip()}")
        return time.perf_counter() - start, each

    def measured(self, script: str, jobs: int, label: str, title: str) -> float:
        """One measured run: `jobs` submissions of `script`, its row printed with the load, the
        hypervisor's steal and slurmctld's handler time, then every job cancelled; its rate."""
        cpu, load, mark = steal_meter(), conditions(), self.log.stat().st_size
        before = self.answerer_counts()
        secs, each = self.storm(script, jobs, label)
        extra = f"{load}; {cpu()}; {self.handled(mark)}{self.asked(before)}"
        rate = row(title, jobs, secs, each, extra)
        self.cancel_all()
        return rate

    def answerer_counts(self) -> dict[str, int] | None:
        """The answerer's counters (`stats`), or None when none answers (stopped, the floor)."""
        import json

        from dacservice.answerer.wire import ask

        try:
            r = ask(str(self.cluster.answerer_socket), "stats", [], timeout=1.0)
        except OSError:
            return None
        if r[0] != "ANSWER":
            return None
        return {k: v for k, v in json.loads(r[2]).items() if type(v) is int}

    def asked(self, before: dict[str, int] | None) -> str:
        """How many job_process calls of the run reached the answerer's socket (the rest read
        a valid file: burst_buffer.lua, no round trip), by where their answer came from."""
        after = self.answerer_counts()
        if before is None or after is None:
            return ""
        moved = {
            k.partition(":")[2]: after[k] - before.get(k, 0)
            for k in after
            if k.startswith("job_process:") and after[k] != before.get(k, 0)
        }
        return "; job_process asked: " + (
            ", ".join(f"{n} {where}" for where, n in sorted(moved.items())) or "none"
        )

    def cancel_all(self) -> None:
        """Every job of the submit user's cancelled, and gone from squeue."""
        self.run("scancel", "-u", self.user.pw_name, as_user=False)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            r = self.run("squeue", "-h", "-u", self.user.pw_name, "-t", "PD,CF,R,CG", as_user=False)
            if r.returncode == 0 and not r.stdout.strip():
                return
            time.sleep(1)
        raise SystemExit("the storm's jobs were not cancelled within 120 s")


def conditions() -> str:
    return "load " + " ".join(Path("/proc/loadavg").read_text().split()[:3])


def drop_bb_plugin(conf: Path) -> None:
    text = conf.read_text()
    conf.write_text(re.sub(r"^BurstBufferType=.*\n", "", text, flags=re.M))


def row(label: str, jobs: int, seconds: float, each: list[float], extra: str) -> float:
    rate = jobs / seconds
    print(
        f"{label:38} {rate:6.1f} sbatch/s  median {statistics.median(each):5.1f} ms  "
        f"p99 {p99(each):6.1f} ms  ({extra})"
    )
    return rate


def main() -> int:
    from daclocal import cluster

    if {"-h", "--help"} & set(sys.argv[1:]):  # a whole run takes minutes: not for a typo
        print(__doc__)
        return 0
    jobs = int(sys.argv[sys.argv.index("--jobs") + 1]) if "--jobs" in sys.argv else JOBS
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else ROUNDS
    rel = slurm_release(sys.argv) or "22.05"
    with local_dac(servers=2, bricks_per_server=4, release=rel) as (state, _env, work):
        sub = Submitter(state, work)
        cpus = os.cpu_count()
        print(f"Slurm {rel}, {jobs} held sbatch in a row each, {rounds} rounds, {cpus} CPUs")
        answerer = state.slurm["pids"].get("answerer")
        label = "dac (burst_buffer/lua, answerer)"
        if not answerer:  # DAC_LOCAL_ANSWERER=0: the fallback's path throughout
            label = "dac, no answerer (forks dacctl)"
        # a cancelled job's record stays MinJobAge (300 s): the rounds' jobs would pass Slurm's
        # MaxJobCount (10,000), past which sbatch sleeps and retries
        conf = sub.cluster.conf.read_text() + "MaxJobCount=200000\n"
        lua = sub.cluster.conf.parent / "burst_buffer.lua"
        ours = lua.read_bytes()
        runs = {
            "dac": (DW, label),
            "none": (without_dw(DW), "no burst buffer plugin, no #DW"),
        }
        if "--floor" in sys.argv:
            runs["floor"] = (DW, "Slurm's floor (hooks answering nothing)")

        def configure(kind: str) -> None:
            """slurm.conf and burst_buffer.lua for `kind`, slurmctld restarted on its saved
            state (every run follows a restart: the first, on the slurmctld the local DAC
            booted, was the slowest in every quiet run), its first hooks and connections
            made by 20 jobs not counted."""
            sub.cluster.conf.write_text(conf)
            lua.write_bytes(ours)
            if kind == "none":
                drop_bb_plugin(sub.cluster.conf)
            elif kind == "floor":
                lua.write_text(FLOOR_LUA)
            cluster.restart_slurmctld(work / "dac")
            sub.storm(runs[kind][0], 20, f"warm-{kind}")
            sub.cancel_all()

        rates: dict[str, list[float]] = {kind: [] for kind in runs}
        try:
            if answerer:  # the fallback, once: burst_buffer.lua forks dacctl for each job_process
                configure("dac")
                os.kill(answerer, 15)
                time.sleep(1)
                sub.measured(DW, jobs, "forked", "dac, answerer stopped (forks dacctl)")
                cluster.restart_answerer(work / "dac")
            kinds = list(runs)
            for r in range(rounds):  # each kind in each place in turn, as the load drifts
                for kind in kinds[r % len(kinds) :] + kinds[: r % len(kinds)]:
                    configure(kind)
                    script, title = runs[kind]
                    rates[kind].append(sub.measured(script, jobs, kind, f"{title}, round {r + 1}"))
        finally:
            sub.cluster.conf.write_text(conf.removesuffix("MaxJobCount=200000\n"))
            lua.write_bytes(ours)
    mean = {kind: statistics.mean(v) for kind, v in rates.items()}
    ratio = mean["dac"] / mean["none"]
    ok = ratio >= RATIO
    each = ", ".join(f"{d / n:.2f}" for d, n in zip(rates["dac"], rates["none"], strict=True))
    if "floor" in mean:
        print(
            f"Slurm's floor {mean['floor'] / mean['none']:.2f}x no burst buffer's; dac "
            f"{mean['dac'] / mean['floor']:.2f}x the floor's"
        )
    print(
        f"dac's rate (mean of {rounds} rounds) {ratio:.2f}x no burst buffer's (each round: "
        f"{each}), budget >= {RATIO:.2f}x: {'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
