"""Budget (issue 45, item 6): while one unprivileged user runs `scontrol show bbstat` (and, under
burst_buffer/datawarp, `scontrol show dwstat`) in a loop as fast as it can from FLOODERS
processes, or submits huge or many-line scripts as fast as it can (`--flood scripts,lines`),
another unprivileged user's plain `sbatch` keeps its mean within 2x its quiet mean (its worst
is printed beside it).

Why a status loop reaches another user's sbatch at all (Slurm's source, the same in 22.05, 24.11
and 26.05): slurmctld answers REQUEST_BURST_BUFFER_STATUS in the RPC's own thread through
bb_g_get_status, which holds the burst-buffer plugin lock (g_context_lock) for the whole of the
plugin's get_status: burst_buffer/lua's slurm_bb_get_status run by slurmscriptd (a fork of it on
22.05, slurmctld executed afresh in its Lua mode on 24.11+), or burst_buffer/datawarp's
GetSysStatus forked and waited for (run_command, 2 s at most). Every submission takes that lock
too, whether or not the job has a buffer (_job_create: bb_g_job_validate, bb_g_job_validate2),
while it holds the job write lock. A Python dac-bbstat started per call held the lock ~70 ms a
call; with the answerer it is dac's answer over a unix socket (dacservice/answerer/, bbstat).

    .venv/bin/python bench/bbstat_flood.py [--plugin lua|datawarp] [--slurm-release R]
        [--flood bbstat|scripts|lines[,...]] [--n N] [--rounds K] [--pace S] [--fork] [--floor]
        [--rate-limit PARAMS]

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

`--flood scripts,lines` (either or both; `bbstat`, the status loop above, is the default):
each flooder process instead runs `sbatch --hold` in a loop, as fast as it can, of
  scripts: a 3 MB script: `#DW jobdw capacity=512MiB ... pool=default`, then 3,000,000 bytes of
           80-byte comment lines, then a command (BIG_COMMENTS);
  lines:   a script of 50,000 create_persistent lines (CREATES), in the form that reaches
           dac's job_process under the plugin: lua, `#DW create_persistent name=cN
           capacity=1GiB pool=default` (22.05's burst_buffer/lua itself refuses a capacity=
           without a pool=, before any hook); datawarp, `#BB create_persistent name=cN
           capacity=1GiB` after a `#DW jobdw` line (burst_buffer/datawarp itself refuses
           `#DW create_persistent`, and calls no job_process without a jobdw line).
Both are past the bounds of the comment block dac reads (1 MiB, 10,000 lines; docs/slurm.md,
Directives), so dac refuses every one at submission; the issue's own script (the same lines
without a pool=, no jobdw) is submitted once beforehand and its answer printed. Each round is
a quiet phase, then one flooded phase per kind; each flooded line counts the flood's
submissions a second (and how many Slurm accepted) and how the answerer answered their
job_process. A victim's submission that fails (sbatch gives up after MessageTimeout, 10 s)
counts at its time and fails the budget. `--floor` here is a job_process that accepts every
script at once (lua: bench/sbatch_storm.py's FLOOR_LUA, which answers the local DAC's pools;
datawarp: FLOOR_WLM_CLI, a shell script as GetSysState), so Slurm receives, translates and
stores each flood script and keeps the job (held; cancelled after the phase): Slurm's own cost
of the flood, which dac cannot win back. Before the rounds, the answerer's own time to refuse
each script (as root, `ask` with its path, 50 each); after them, slurmctld's own time for each
job_process during 3 s of each flood (10 s of the lines one), dac's and the floor's
(DebugFlags=BurstBuffer at verbose): how long each refusal held the plugin lock.
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
from sbatch_storm import FLOOR_LUA as FLOOR_LUA_POOLS  # noqa: E402
from sbatch_storm import POOLS, Submitter, conditions  # noqa: E402

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
#: `--flood`'s kinds: the status loop, or sbatch of one of the two scripts below
FLOODS = ("bbstat", "scripts", "lines")
JOBDW = "#DW jobdw capacity=512MiB access_mode=striped type=scratch pool=default\n"
#: `--flood scripts`: this many bytes of comment lines after the jobdw line (3 MB)
BIG_COMMENTS = 3_000_000
#: `--flood lines`: this many create_persistent lines
CREATES = 50_000
#: seconds of each flood whose job_process slurmctld times (3 s unless here: a lines flood
#: gets one script through every 2-5 s)
WINDOW = {"lines": 10.0}


def flood_script(kind: str, plugin: str) -> str:
    """`--flood scripts` or `lines`' script (module docstring), for `plugin`; `issue`: the
    issue's own 50,000 `#DW create_persistent name=cN capacity=1GiB` lines."""
    if kind == "scripts":
        comment = "# " + "x" * 77 + "\n"  # 80 bytes
        return "#!/bin/bash\n" + JOBDW + comment * (BIG_COMMENTS // len(comment)) + "srun x\n"
    if kind == "issue":
        lines = "".join(f"#DW create_persistent name=c{i} capacity=1GiB\n" for i in range(CREATES))
        return "#!/bin/bash\n" + lines + "srun x\n"
    if plugin == "lua":  # 22.05's burst_buffer/lua refuses a capacity= with no pool= itself
        lines = "".join(
            f"#DW create_persistent name=c{i} capacity=1GiB pool=default\n" for i in range(CREATES)
        )
        return "#!/bin/bash\n" + lines + "srun x\n"
    # datawarp refuses #DW create_persistent itself, and runs no job_process without a jobdw
    lines = "".join(f"#BB create_persistent name=c{i} capacity=1GiB\n" for i in range(CREATES))
    return "#!/bin/bash\n" + JOBDW + lines + "srun x\n"


#: each flooder: a shell loop as the flooder running its command with each of its words in
#: turn, counting its calls and those that succeeded, which it prints on SIGTERM
_LOOP = """n=0 ok=0
trap 'echo $n $ok; exit 0' TERM
cmd=$1; shift
while :; do
  for w in "$@"; do
    "$cmd" $w >/dev/null 2>&1 && ok=$((ok+1))
    n=$((n+1))
  done
done
"""
_GET_STATUS = re.compile(r"slurm_bb_get_status ran for usec=(\d+)")
#: burst_buffer/lua's `slurm_bb_job_process ran for`, burst_buffer/datawarp's `job_process ran for`
_JOB_PROCESS = re.compile(r"job_process ran for usec=(\d+)")
_SUBMITTED = re.compile(r"_slurm_rpc_submit_batch_job: JobId=(\d+) .*?usec=(\d+)")
#: the victim's submissions that failed, by phase label (a failure fails the budget)
FAILED: dict[str, int] = {}
#: `--floor`'s burst_buffer.lua: every hook any release requires, answering at once
FLOOR_LUA = "".join(
    f"function slurm_bb_{name}(...)\n\treturn slurm.SUCCESS, \"\"\nend\n"
    for name in (
        "job_process", "pools", "job_teardown", "setup", "data_in", "test_data_in",
        "real_size", "paths", "pre_run", "post_run", "data_out", "test_data_out", "get_status",
    )
)  # fmt: skip
#: `--floor`'s GetSysState under burst_buffer/datawarp with `--flood scripts|lines`: the local
#: DAC's pools, no buffers, and nothing at once for every other function (job_process: valid)
FLOOR_WLM_CLI = f"""#!/bin/sh
case "$2" in
pools) echo '{POOLS}' ;;
show_instances) echo '{{"instances": []}}' ;;
show_sessions) echo '{{"sessions": []}}' ;;
show_configurations) echo '{{"configurations": []}}' ;;
esac
exit 0
"""


class Flood:
    """FLOODERS loops of the flooder's `argv` (its command, then the words it cycles through,
    each split at spaces), from `start()` to `stop()`."""

    def __init__(self, sub: Submitter, argv: list[str], what: str = "calls"):
        self.sub, self.argv, self.what = sub, argv, what
        self.procs: list[subprocess.Popen[str]] = []
        self.started = 0.0
        self.ok = 0

    def start(self) -> None:
        env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": str(self.sub.cluster.conf)}
        self.procs = [
            subprocess.Popen(
                ["/bin/sh", "-c", _LOOP, "flood", *self.argv],
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
        """The flood's calls a second, all its processes together (`ok`: how many succeeded)."""
        took = time.monotonic() - self.started
        calls = self.ok = 0
        for p in self.procs:
            p.terminate()
            out = p.communicate(timeout=120)[0].split()
            calls += int(out[0]) if out else 0
            self.ok += int(out[1]) if len(out) > 1 else 0
        return calls / took

    def said(self, rate: float) -> str:
        """The flood's rate, as a phase's line says it."""
        if self.what == "calls":
            return f"flood {rate:.0f} calls/s"
        return f"flood {rate:.1f} sbatch/s, {self.ok} accepted"


def once_as_flooder(sub: Submitter, *argv: str) -> str:
    r = subprocess.run(
        [sub.cluster.client(argv[0]), *argv[1:]],
        capture_output=True,
        text=True,
        user=FLOODER[0],
        group=FLOODER[1],
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "SLURM_CONF": str(sub.cluster.conf)},
        timeout=120,
    )
    return (r.stdout + r.stderr).strip() or f"(nothing; exit status {r.returncode})"


def phase(
    sub: Submitter,
    script: Path,
    n: int,
    flood: Flood | None,
    pace: float = 0.0,
    label: str = "",
) -> list[float]:
    """`n` held submissions of `script` in a row as the victim, flooded or not; their ms. Its
    line printed: mean, worst, the load, slurmctld's handler, the flood's rate and answers."""
    load, mark = conditions(), sub.log.stat().st_size
    before = sub.answerer_counts()
    if flood is not None:
        flood.start()
        time.sleep(2.0)  # at its height
    each: list[float] = []
    ids: set[str] = set()
    failed: list[str] = []
    try:
        for _ in range(n):
            t = time.perf_counter()
            r = sub.run("sbatch", "--parsable", "--hold", "-o", "/dev/null", str(script))
            each.append((time.perf_counter() - t) * 1000)
            if r.returncode == 0:
                ids.add(r.stdout.strip().split(";")[0])
            else:  # e.g. slurmctld not answering within MessageTimeout: counted, at its time
                failed.append((r.stderr.strip().splitlines() or ["(no message)"])[-1])
            time.sleep(pace)
    finally:
        rate = flood.stop() if flood is not None else 0.0
    extra = f"{load} -> {conditions().removeprefix('load ')}; {handled(sub, mark, ids)}"
    if flood is not None:
        hook = "bbstat" if flood.what == "calls" else "job_process"
        extra += f"; {flood.said(rate)}{answered(before, sub.answerer_counts(), hook)}"
    label = label or ("flooded" if flood is not None else "quiet")
    if failed:
        FAILED[label] = FAILED.get(label, 0) + len(failed)
        extra += f"; {len(failed)} of {n} failed, e.g. {failed[0]!r}"
    print(
        f"  {label:16} mean {statistics.mean(each):7.1f} ms  median "
        f"{statistics.median(each):7.1f} ms  worst {max(each):7.1f} ms  ({extra})"
    )
    cancel_jobs(sub, sub.user.pw_name)
    if flood is not None and flood.what == "sbatch":  # a timed-out one may be made yet
        cancel_flooders(sub)
    return each


def handled(sub: Submitter, since: int, ids: set[str]) -> str:
    """slurmctld's own median time in the submit RPC for the victim's jobs `ids`, logged after
    byte `since` (the flooder's accepted jobs, under `--floor`, left out)."""
    with open(sub.log, errors="replace") as f:
        f.seek(since)
        usecs = [int(u) for job, u in _SUBMITTED.findall(f.read()) if job in ids]
    if not usecs:
        return "slurmctld logged no submission time"
    return f"slurmctld's handler median {statistics.median(usecs) / 1000:.2f} ms"


def cancel_jobs(sub: Submitter, user: str) -> None:
    """Every job of `user`'s cancelled, and gone from squeue. scancel again until none is left:
    a submission its sbatch gave up on (MessageTimeout) may be made after the first."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        sub.run("scancel", "-u", user, as_user=False)
        r = sub.run("squeue", "-h", "-u", user, "-t", "PD,CF,R,CG", as_user=False)
        if r.returncode == 0 and not r.stdout.strip():
            return
        time.sleep(2)
    raise SystemExit(f"{user}'s jobs were not cancelled within 300 s")


def cancel_flooders(sub: Submitter) -> None:
    """Every job of the flooder's (accepted under `--floor`) cancelled, and gone from squeue."""
    cancel_jobs(sub, str(FLOODER[0]))


def answered(before: dict[str, int] | None, after: dict[str, int] | None, hook: str) -> str:
    """How the answerer answered the flood's `hook` calls (none: it forked, or is stopped)."""
    if before is None or after is None:
        return "; answerer: not running"
    moved = {
        k.partition(":")[2]: after[k] - before.get(k, 0)
        for k in after
        if k.startswith(hook + ":") and after[k] != before.get(k, 0)
    }
    return f"; answerer's {hook}: " + (
        ", ".join(f"{n} {where}" for where, n in sorted(moved.items())) or "none"
    )


def round_trips(sub: Submitter, words: list[str], n: int = 200) -> str:
    """The answerer's own time for each flood word's bbstat (`ask`, as root, one at a time)."""
    from dacservice.answerer.wire import ask

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


def refusal_round_trips(sub: Submitter, scripts: dict[str, Path], n: int = 50) -> str:
    """The answerer's own time to answer each flood script's job_process (`ask`, as root, one
    at a time), as burst_buffer.lua asks for a script over 64 KiB: by its path."""
    from dacservice.answerer.wire import ask

    out = []
    for kind, path in scripts.items():
        ms = []
        for _ in range(n):
            t = time.perf_counter()
            reply = ask(str(sub.cluster.answerer_socket), "job_process", ["--job", str(path)])
            ms.append((time.perf_counter() - t) * 1000)
        ms.sort()
        rc = reply[1] if reply[0] == "ANSWER" else reply[0]
        p90 = ms[int(0.9 * n)]
        out.append(f"{kind} median {statistics.median(ms):.2f} ms p90 {p90:.2f} (rc {rc})")
    return f"answerer's job_process round trip ({conditions()}): " + "; ".join(out)


class Floor:
    """`--floor`: the status Slurm's alone (module docstring), from `__enter__` to `__exit__`;
    with `submissions`, job_process Slurm's alone (every script accepted at once) instead."""

    def __init__(self, sub: Submitter, plugin: str, submissions: bool = False):
        etc = sub.cluster.conf.parent
        self.plugin = plugin
        if plugin == "lua":
            self.path = etc / "burst_buffer.lua"
            # the pools answered, so a flood script's pool=default is one Slurm knows
            self.floor = (FLOOR_LUA_POOLS if submissions else FLOOR_LUA).encode()
        elif submissions:
            self.path = etc / "dw_wlm_cli"  # GetSysState: the forwarder, with the answerer
            self.floor = FLOOR_WLM_CLI.encode()
            if f"GetSysState={self.path}\n" not in (etc / "burst_buffer.conf").read_text():
                raise SystemExit("--floor with --flood scripts|lines needs the answerer")
        else:
            self.path = etc / "dwstat"
            self.floor = Path("/bin/true").read_bytes()
        self.ours = self.path.read_bytes()

    def __enter__(self) -> Floor:
        # burst_buffer/lua loads the script afresh for every call; datawarp execs the file
        self.path.write_bytes(self.floor)
        return self

    def __exit__(self, *exc: object) -> None:
        self.path.write_bytes(self.ours)


def hook_timing(
    sub: Submitter, flood: Flood, hook: str = "get_status", seconds: float = 3.0
) -> str:
    """slurmctld's own time for each slurm_bb_get_status (or each job_process, `hook`) during
    `seconds` of flood (DebugFlags=BurstBuffer at verbose): the lock's hold, call by call."""
    sub.run("scontrol", "setdebug", "verbose", as_user=False)
    mark = sub.log.stat().st_size
    try:
        flood.start()
        time.sleep(seconds)
        rate = flood.stop()
    finally:
        sub.run("scontrol", "setdebug", "info", as_user=False)
    pattern = _GET_STATUS if hook == "get_status" else _JOB_PROCESS
    with open(sub.log, errors="replace") as f:
        f.seek(mark)
        ms = sorted(int(u) / 1000 for u in pattern.findall(f.read()))
    if flood.what == "sbatch":
        cancel_flooders(sub)
    name = "slurm_bb_get_status" if hook == "get_status" else "job_process"
    if not ms:
        return f"slurmctld logged no {name} time ({flood.said(rate)})"
    return (
        f"slurmctld's {name} under the flood ({flood.said(rate)}, {conditions()}): "
        f"n={len(ms)} median {statistics.median(ms):.1f} ms, p90 {ms[int(0.9 * (len(ms) - 1))]:.1f}"
        f" ms, max {ms[-1]:.1f} ms"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plugin", choices=("lua", "datawarp"), default="lua")
    p.add_argument("--slurm-release", default=None)
    p.add_argument("--flood", default="bbstat", help="bbstat, or scripts and/or lines (a,b)")
    p.add_argument("--n", type=int, default=N)
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument("--fork", action="store_true")
    p.add_argument("--floor", action="store_true")
    p.add_argument("--rate-limit", metavar="PARAMS", default="")
    p.add_argument("--pace", type=float, default=0.0)
    args = p.parse_args()
    kinds = list(dict.fromkeys(args.flood.split(",")))
    if not kinds or any(k not in FLOODS for k in kinds) or ("bbstat" in kinds and len(kinds) > 1):
        p.error("--flood: bbstat, or scripts, lines or scripts,lines")
    submitting = kinds != ["bbstat"]
    from daclocal import cluster

    rel = slurm_release(sys.argv) or "22.05"
    with local_dac(release=rel, plugin=args.plugin) as (state, env, work):
        sub = Submitter(state, work)
        hot_job(str(Path(sys.executable).parent / "dacctl"), env, work)  # job 7's buffer
        script = work / "plain.sh"
        script.write_text(PLAIN)
        script.chmod(0o644)
        answerer = state.slurm["pids"].get("answerer")
        floods: dict[str, Flood] = {}
        words = [w.format(job=7) for w in WORDS[args.plugin]]
        if submitting:
            scripts = {k: work / f"flood-{k}.sh" for k in (*kinds, "issue")}
            for kind, path in scripts.items():
                path.write_text(flood_script(kind, args.plugin))
                path.chmod(0o644)
            sbatch = sub.cluster.client("sbatch")
            for kind in kinds:  # the loop splits each word at spaces: the paths have none
                flood_argv = [sbatch, f"--hold --parsable -o /dev/null {scripts[kind]}"]
                floods[kind] = Flood(sub, flood_argv, "sbatch")
            what = ", ".join(
                f"{k} ({scripts[k].stat().st_size / 1e6:.2f} MB, "
                f"{scripts[k].read_text().count(chr(10)):,} lines)"
                for k in kinds
            )
        else:
            floods["bbstat"] = Flood(sub, [sub.cluster.client("scontrol"), *words])
            what = ", ".join(repr(w) for w in words)
        print(
            f"Slurm {rel}, burst_buffer/{args.plugin}, answerer "
            f"{'running' if answerer else 'not running (DAC_LOCAL_ANSWERER=0)'}; {args.n} plain "
            f"held sbatch a phase as {sub.user.pw_name}; uid {FLOODER[0]} floods from "
            f"{FLOODERS} processes: {what}"
        )
        if submitting:  # what the flood sees: each script refused, and by whom
            for kind, path in scripts.items():
                t = time.perf_counter()
                said = once_as_flooder(sub, "sbatch", "--hold", "-o", "/dev/null", str(path))
                took = (time.perf_counter() - t) * 1000
                print(f"  {kind} as uid {FLOODER[0]} ({took:.0f} ms): {said.splitlines()[0]!r}")
            cancel_flooders(sub)  # any job of these the plugin accepted
            if answerer:
                print(refusal_round_trips(sub, {k: scripts[k] for k in kinds}))
        else:
            for w in words:  # what the flood sees: the answers it asks for, not errors
                said = once_as_flooder(sub, "scontrol", *w.split()).splitlines()[0]
                print(f"  {w!r} as uid {FLOODER[0]}: {said!r}")
            if answerer:
                print(round_trips(sub, words))
        phase(sub, script, 10, None)  # warm: slurmctld's first submissions, not counted

        def flooded(label: str = "") -> dict[str, list[float]]:
            """One flooded phase per kind; each kind's ms."""
            return {
                k: phase(sub, script, args.n, f, args.pace, f"{label}flooded {k}")
                for k, f in floods.items()
            }

        quiet: list[float] = []
        loud: dict[str, list[float]] = {k: [] for k in floods}
        for r in range(args.rounds):
            print(f"round {r + 1}")
            quiet += phase(sub, script, args.n, None, args.pace)
            for k, each in flooded().items():
                loud[k] += each
        if args.fork and answerer:
            print("round with the answerer stopped: every call forks (runs) dacctl or dac-bbstat")
            subprocess.run(["kill", "-TERM", str(answerer)], check=True)
            time.sleep(1)
            try:
                phase(sub, script, args.n, None, args.pace)
                flooded("forked, ")
            finally:
                cluster.restart_answerer(work / "dac")
        floor: tuple[list[float], dict[str, list[float]]] = ([], {})
        timings = []
        if args.floor:
            print(
                "round with Slurm's floor: "
                + ("a job_process accepting every script" if submitting else "a status of nothing")
                + " at once"
            )
            with Floor(sub, args.plugin, submitting):
                floor = (phase(sub, script, args.n, None, args.pace), flooded("floor, "))
                if submitting:
                    for k, f in floods.items():
                        said = hook_timing(sub, f, "job_process", WINDOW.get(k, 3.0))
                        timings.append(f"floor, {k}: {said}")
                elif args.plugin == "lua":
                    print("  " + hook_timing(sub, floods["bbstat"]))
        limited: tuple[list[float], dict[str, list[float]]] = ([], {})
        if args.rate_limit:
            print(f"round with SlurmctldParameters={args.rate_limit}, slurmctld restarted")
            conf = sub.cluster.conf.read_text()
            sub.cluster.conf.write_text(conf + f"SlurmctldParameters={args.rate_limit}\n")
            cluster.restart_slurmctld(work / "dac")
            try:
                limited = (phase(sub, script, args.n, None, args.pace), flooded("limited, "))
            finally:
                sub.cluster.conf.write_text(conf)
                cluster.restart_slurmctld(work / "dac")
        if submitting:
            for k, f in floods.items():
                print(f"dac, {k}: " + hook_timing(sub, f, "job_process", WINDOW.get(k, 3.0)))
            for line in timings:
                print(line)
        elif args.plugin == "lua":
            print(hook_timing(sub, floods["bbstat"]))
        counts = sub.answerer_counts()
        print(f"answerer counters: {json.dumps(counts)}")
    ok = True
    for k in floods:
        title = "another user's plain sbatch" + ("" if k == "bbstat" else f", flooded by {k}")
        ok = verdict(title, quiet, loud[k], failed=FAILED.get(f"flooded {k}", 0)) and ok
        if floor[1]:
            failed = FAILED.get(f"floor, flooded {k}", 0)
            verdict("  the same on Slurm's floor", floor[0], floor[1][k], failed, budget=False)
    if args.rate_limit:  # the configuration under test: Slurm's own bound per caller
        for k in floods:
            label = f"the same{'' if k == 'bbstat' else ', ' + k}, SlurmctldParameters="
            failed = FAILED.get(f"limited, flooded {k}", 0)
            ok = verdict(label + args.rate_limit, limited[0], limited[1][k], failed) and ok
    return 0 if ok else 1


def verdict(
    label: str, quiet: list[float], loud: list[float], failed: int = 0, budget: bool = True
) -> bool:
    """The flooded mean against RATIO x the quiet one, printed (`budget`: as PASS or FAIL); a
    flooded submission that `failed` fails it whatever the mean."""
    q, f = statistics.mean(quiet), statistics.mean(loud)
    ok = f <= RATIO * q and not failed
    print(
        f"{label}: quiet mean {q:.1f} ms (worst {max(quiet):.1f}), flooded mean {f:.1f} ms "
        f"(worst {max(loud):.1f}) = {f / q:.2f}x"
        + (f", {failed} of {len(loud)} flooded submissions failed" if failed else "")
        + (f", budget <= {RATIO:.1f}x: {'PASS' if ok else 'FAIL'}" if budget else "")
    )
    return ok


if __name__ == "__main__":
    sys.exit(main())
