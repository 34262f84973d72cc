"""Budget (issue 45, item 6): while one unprivileged user runs `scontrol show bbstat` (and, under
burst_buffer/datawarp, `scontrol show dwstat`) in a loop as fast as it can from FLOODERS
processes, another unprivileged user's plain `sbatch` keeps its mean within 2x its quiet mean
(its worst is printed beside it).

Why a status loop reaches another user's sbatch at all (Slurm's source, the same in 22.05, 24.11
and 26.05): slurmctld answers REQUEST_BURST_BUFFER_STATUS in the RPC's own thread through
bb_g_get_status, which holds the burst-buffer plugin lock (g_context_lock) for the whole of the
plugin's get_status: burst_buffer/lua's slurm_bb_get_status run by slurmscriptd (a fork of it on
22.05, slurmctld executed afresh in its Lua mode on 24.11+), or burst_buffer/datawarp's
GetSysStatus forked and waited for (run_command, 2 s at most). Every submission takes that lock
too, whether or not the job has a buffer (_job_create: bb_g_job_validate, bb_g_job_validate2),
while it holds the job write lock. A Python dac-bbstat started per call held the lock ~70 ms a
call; with the answerer it is dac's answer over a unix socket (dacservice/answerer.py, bbstat).

    .venv/bin/python bench/bbstat_flood.py [--plugin lua|datawarp] [--slurm-release R]
        [--n N] [--rounds K] [--pace S] [--fork] [--floor] [--rate-limit PARAMS]

Runs in one local DAC (2 servers, 2 Slurm nodes; needs root) with the answerer (the local DAC's
default: under datawarp GetSysStatus is dac's forwarder slurm-plugin/dwstat.lua). The victim is
the local DAC's submit user (dacuser), the flooder uid 5678 (gid 8765, no passwd entry: Slurm and
dac go by uid). ROUNDS rounds (`--rounds`) of a quiet phase then a flooded one, N (`--n`)
submissions each, one after the other; every job is held (`sbatch --hold`: the submission
alone, as bench/sbatch_storm.py measures it) and cancelled after its phase. Each phase's line
says its load average before and after, slurmctld's own median time in the submit RPC, the
flood's calls a second and how the answerer answered them. The flood cycles through WORDS:
the pools (from the answerer's memory), a job's line and the sessions (read from etcd).
`--fork`: one more round with the answerer stopped, where every call forks dac-bbstat (lua) or
runs it (datawarp's forwarder finds no socket): the path before issue 45, for reference.
`--floor`: one more round where the status is Slurm's alone: a slurm_bb_get_status that
returns nothing at once (lua: FLOOR_LUA, no socket, no file), or GetSysStatus a copy of
/bin/true (datawarp): what Slurm's own path costs a call, which no script can win back.
`--rate-limit PARAMS`: one more round on a slurmctld restarted with SlurmctldParameters=PARAMS,
e.g. `rl_enable,rl_refill_rate=10,rl_bucket_size=50` (Slurm 23.02+: a token bucket per user,
checked as each RPC arrives, before any lock; a client over it sleeps and tries again), Slurm's
own bound per caller. `--pace S`: the victim waits S seconds between submissions (under a rate
limit a back-to-back storm of its own would be limited too).
Before the rounds, the answerer's own round trip for each word (as root, `ask`, 200 each);
after them, under burst_buffer/lua, slurmctld's own timing of slurm_bb_get_status during 3 s
of flood (DebugFlags=BurstBuffer at verbose): how long each call held the lock.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import hot_job, local_dac, slurm_release  # noqa: E402
from sbatch_storm import Submitter, conditions  # noqa: E402

#: another user's plain sbatch, flooded, within this many times its quiet mean
RATIO = 2.0
N = 60
ROUNDS = 2
FLOODERS = 2
FLOODER = (5678, 8765)
#: what the flood asks, in turn; `{job}` is a job with a buffer (bench/common.py hot_job: 7)
WORDS = {
    "lua": ["show bbstat", "show bbstat {job}", "show bbstat sessions"],
    "datawarp": ["show bbstat", "show dwstat", "show bbstat {job}", "show dwstat sessions"],
}
PLAIN = "#!/bin/bash\n#SBATCH -t 10\nsrun hostname\n"
#: each flooder: a shell loop as the flooder, counting its calls, which it prints on SIGTERM
_LOOP = """n=0
trap 'echo $n; exit 0' TERM
scontrol=$1; shift
while :; do
  for w in "$@"; do
    "$scontrol" $w >/dev/null 2>&1
    n=$((n+1))
  done
done
"""
_GET_STATUS = re.compile(r"slurm_bb_get_status ran for usec=(\d+)")
#: `--floor`'s burst_buffer.lua: every hook any release requires, answering at once
FLOOR_LUA = "".join(
    f"function slurm_bb_{name}(...)\n\treturn slurm.SUCCESS, \"\"\nend\n"
    for name in (
        "job_process", "pools", "job_teardown", "setup", "data_in", "test_data_in",
        "real_size", "paths", "pre_run", "post_run", "data_out", "test_data_out", "get_status",
    )
)  # fmt: skip


class Flood:
    """FLOODERS loops of the flooder's scontrol calls, from `start()` to `stop()`."""

    def __init__(self, sub: Submitter, words: list[str]):
        self.sub, self.words = sub, words
        self.procs: list[subprocess.Popen[str]] = []
        self.started = 0.0

    def start(self) -> None:
        env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": str(self.sub.cluster.conf)}
        self.procs = [
            subprocess.Popen(
                ["/bin/sh", "-c", _LOOP, "flood", self.sub.cluster.client("scontrol"), *self.words],
                stdout=subprocess.PIPE,
                text=True,
                user=FLOODER[0],
                group=FLOODER[1],
                extra_groups=[],
                cwd="/",
                env=env,
            )
            for _ in range(FLOODERS)
        ]
        self.started = time.monotonic()

    def stop(self) -> float:
        """The flood's calls a second, all its processes together."""
        took = time.monotonic() - self.started
        calls = 0
        for p in self.procs:
            p.terminate()
            out = p.communicate(timeout=60)[0].split()
            calls += int(out[0]) if out else 0
        return calls / took


def once_as_flooder(sub: Submitter, words: str) -> str:
    r = subprocess.run(
        [sub.cluster.client("scontrol"), *words.split()],
        capture_output=True,
        text=True,
        user=FLOODER[0],
        group=FLOODER[1],
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "SLURM_CONF": str(sub.cluster.conf)},
        timeout=60,
    )
    return (r.stdout + r.stderr).strip()


def phase(
    sub: Submitter, script: Path, n: int, flood: Flood | None, pace: float = 0.0
) -> list[float]:
    """`n` held submissions of `script` in a row as the victim, flooded or not; their ms. Its
    line printed: mean, worst, the load, slurmctld's handler, the flood's rate and answers."""
    load, mark = conditions(), sub.log.stat().st_size
    before = sub.answerer_counts()
    if flood is not None:
        flood.start()
        time.sleep(2.0)  # at its height
    each: list[float] = []
    try:
        for _ in range(n):
            t = time.perf_counter()
            r = sub.run("sbatch", "--parsable", "--hold", "-o", "/dev/null", str(script))
            each.append((time.perf_counter() - t) * 1000)
            if r.returncode != 0:
                raise SystemExit(f"sbatch failed: {r.stderr.strip()}")
            time.sleep(pace)
    finally:
        rate = flood.stop() if flood is not None else 0.0
    extra = f"{load} -> {conditions().removeprefix('load ')}; {sub.handled(mark)}"
    if flood is not None:
        extra += f"; flood {rate:.0f} calls/s{answered(before, sub.answerer_counts())}"
    label = "flooded" if flood is not None else "quiet"
    print(
        f"  {label:8} mean {statistics.mean(each):7.1f} ms  median "
        f"{statistics.median(each):7.1f} ms  worst {max(each):7.1f} ms  ({extra})"
    )
    sub.cancel_all()
    return each


def answered(before: dict[str, int] | None, after: dict[str, int] | None) -> str:
    """How the answerer answered the flood's bbstat calls (none: it forked, or is stopped)."""
    if before is None or after is None:
        return "; answerer: not running"
    moved = {
        k.partition(":")[2]: after[k] - before.get(k, 0)
        for k in after
        if k.startswith("bbstat:") and after[k] != before.get(k, 0)
    }
    return "; answerer's bbstat: " + (
        ", ".join(f"{n} {where}" for where, n in sorted(moved.items())) or "none"
    )


def round_trips(sub: Submitter, words: list[str], n: int = 200) -> str:
    """The answerer's own time for each flood word's bbstat (`ask`, as root, one at a time)."""
    from dacservice.answerer import ask

    out = []
    for w in dict.fromkeys(" ".join(w.split()[2:]) for w in words):  # the words after show x
        ms = []
        for _ in range(n):
            t = time.perf_counter()
            reply = ask(str(sub.cluster.answerer_socket), "bbstat", w.split(), caller="")
            ms.append((time.perf_counter() - t) * 1000)
            assert reply[:2] == ("ANSWER", 0), reply
        ms.sort()
        p90 = ms[int(0.9 * n)]
        out.append(f"{w or '(none)'} median {statistics.median(ms):.2f} ms p90 {p90:.2f}")
    return f"answerer's bbstat round trip ({conditions()}): " + "; ".join(out)


class Floor:
    """`--floor`: the status Slurm's alone (module docstring), from `__enter__` to `__exit__`."""

    def __init__(self, sub: Submitter, plugin: str):
        etc = sub.cluster.conf.parent
        self.path = etc / "burst_buffer.lua" if plugin == "lua" else etc / "dwstat"
        self.plugin = plugin
        self.ours = self.path.read_bytes()

    def __enter__(self) -> Floor:
        # burst_buffer/lua loads the script afresh for every call; datawarp execs the file
        floor = FLOOR_LUA.encode() if self.plugin == "lua" else Path("/bin/true").read_bytes()
        self.path.write_bytes(floor)
        return self

    def __exit__(self, *exc: object) -> None:
        self.path.write_bytes(self.ours)


def get_status_timing(sub: Submitter, flood: Flood) -> str:
    """slurmctld's own time for each slurm_bb_get_status during 3 s of flood (burst_buffer/lua
    logs it with DebugFlags=BurstBuffer at verbose): the lock's hold, call by call."""
    sub.run("scontrol", "setdebug", "verbose", as_user=False)
    mark = sub.log.stat().st_size
    try:
        flood.start()
        time.sleep(3.0)
        rate = flood.stop()
    finally:
        sub.run("scontrol", "setdebug", "info", as_user=False)
    with open(sub.log, errors="replace") as f:
        f.seek(mark)
        ms = sorted(int(u) / 1000 for u in _GET_STATUS.findall(f.read()))
    if not ms:
        return "slurmctld logged no slurm_bb_get_status time"
    return (
        f"slurmctld's slurm_bb_get_status under the flood ({rate:.0f} calls/s, {conditions()}): "
        f"n={len(ms)} median {statistics.median(ms):.1f} ms, p90 {ms[int(0.9 * (len(ms) - 1))]:.1f}"
        f" ms, max {ms[-1]:.1f} ms"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plugin", choices=("lua", "datawarp"), default="lua")
    p.add_argument("--slurm-release", default=None)
    p.add_argument("--n", type=int, default=N)
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument("--fork", action="store_true")
    p.add_argument("--floor", action="store_true")
    p.add_argument("--rate-limit", metavar="PARAMS", default="")
    p.add_argument("--pace", type=float, default=0.0)
    args = p.parse_args()
    from daclocal import cluster

    rel = slurm_release(sys.argv) or "22.05"
    with local_dac(release=rel, plugin=args.plugin) as (state, env, work):
        sub = Submitter(state, work)
        hot_job(str(Path(sys.executable).parent / "dacctl"), env, work)  # job 7's buffer
        script = work / "plain.sh"
        script.write_text(PLAIN)
        script.chmod(0o644)
        words = [w.format(job=7) for w in WORDS[args.plugin]]
        answerer = state.slurm["pids"].get("answerer")
        print(
            f"Slurm {rel}, burst_buffer/{args.plugin}, answerer "
            f"{'running' if answerer else 'not running (DAC_LOCAL_ANSWERER=0)'}; {args.n} plain "
            f"held sbatch a phase as {sub.user.pw_name}; uid {FLOODER[0]} floods from "
            f"{FLOODERS} processes: {', '.join(repr(w) for w in words)}"
        )
        for w in words:  # what the flood sees: the answers it asks for, not errors
            print(f"  {w!r} as uid {FLOODER[0]}: {once_as_flooder(sub, w).splitlines()[0]!r}")
        flood = Flood(sub, words)
        if answerer:
            print(round_trips(sub, words))
        phase(sub, script, 10, None)  # warm: slurmctld's first submissions, not counted
        quiet: list[float] = []
        loud: list[float] = []
        limited: tuple[list[float], list[float]] = ([], [])
        for r in range(args.rounds):
            print(f"round {r + 1}")
            quiet += phase(sub, script, args.n, None, args.pace)
            loud += phase(sub, script, args.n, flood, args.pace)
        if args.fork and answerer:
            print("round with the answerer stopped: every call forks (runs) dac-bbstat")
            subprocess.run(["kill", "-TERM", str(answerer)], check=True)
            time.sleep(1)
            try:
                phase(sub, script, args.n, None, args.pace)
                phase(sub, script, args.n, flood, args.pace)
            finally:
                cluster.restart_answerer(work / "dac")
        if args.floor:
            print("round with Slurm's floor: a status that prints nothing at once")
            with Floor(sub, args.plugin):
                phase(sub, script, args.n, None, args.pace)
                phase(sub, script, args.n, flood, args.pace)
                if args.plugin == "lua":
                    print("  " + get_status_timing(sub, flood))
        if args.rate_limit:
            print(f"round with SlurmctldParameters={args.rate_limit}, slurmctld restarted")
            conf = sub.cluster.conf.read_text()
            sub.cluster.conf.write_text(conf + f"SlurmctldParameters={args.rate_limit}\n")
            cluster.restart_slurmctld(work / "dac")
            try:
                limited = (
                    phase(sub, script, args.n, None, args.pace),
                    phase(sub, script, args.n, flood, args.pace),
                )
            finally:
                sub.cluster.conf.write_text(conf)
                cluster.restart_slurmctld(work / "dac")
        if args.plugin == "lua":
            print(get_status_timing(sub, flood))
        counts = sub.answerer_counts()
        print(f"answerer counters: {json.dumps(counts)}")
    ok = verdict("another user's plain sbatch", quiet, loud)
    if args.rate_limit:  # the configuration under test: Slurm's own bound per caller
        ok = verdict(f"the same, SlurmctldParameters={args.rate_limit}", *limited)
    return 0 if ok else 1


def verdict(label: str, quiet: list[float], loud: list[float]) -> bool:
    q, f = statistics.mean(quiet), statistics.mean(loud)
    ok = f <= RATIO * q
    print(
        f"{label}: quiet mean {q:.1f} ms (worst {max(quiet):.1f}), flooded mean {f:.1f} ms "
        f"(worst {max(loud):.1f}) = {f / q:.2f}x, budget <= {RATIO:.1f}x: "
        f"{'PASS' if ok else 'FAIL'}"
    )
    return ok


if __name__ == "__main__":
    sys.exit(main())
