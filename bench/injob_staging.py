"""Stages from inside a running job (issue 36) — budgets:

- ack: a `stage-start` from a compute node answered within 50 ms p99 (the round trip the
  Python API and dacctl make: the munge credential, the service's checks of the caller, the
  job through squeue and sinfo, the paths, the record in etcd);
- drain: a job that writes a checkpoint every INTERVAL s for DURATION s (1 GiB every 10 s for
  2 minutes, as the issue states it), computing by sleeping in between, and drains each one
  while it computes (libdacstage's example, examples/checkpoint.c), ends within 10 % of the
  wall time of the same job without drains; every checkpoint on the destination, byte for
  byte, when the job has ended;
- throughput: the drains' rate (bytes over each stage's running time, from its status) at
  least that of `cp` of the same file in the same job, `cp` followed by `sync FILE` (the
  copier's data is on the disk when its stage ends; cp's alone would be in the page cache),
  and cp alone printed too.

A local DAC of one server (4 bricks of BRICK GiB, loop files) with a 2-node Slurm 22.05
(burst_buffer/lua), jobs of its submit user. Prints the figures, then PASS or FAIL for each.

    .venv/bin/python bench/injob_staging.py [--n 200] [--size-mib 1024] [--interval 10]
                                            [--duration 120] [--brick-gib 4]
                                            [--acks-only]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import local_dac, p99, percentiles, verdict  # noqa: E402

ACK_BUDGET_MS = 50.0
WALL_BUDGET = 1.10
RATE_BUDGET = 1.0
#: drain and cp + sync rounds, alternating which goes first (a medians' comparison)
ROUNDS = 5

#: in the job, with the user launcher's interpreter and import paths: N stage-starts of a
#: 4 KiB file, each timed alone, then waited for (untimed) so the job's cap never refuses one
_ACKS = r"""
import json, os, site, sys, time
n = int(sys.argv[1]); dirs = sys.argv[2:2 + n]
sys.path.insert(0, dirs[0]); [site.addsitedir(d) for d in dirs[1:]]
from daccore.services import user_client
from daccore.services.user_client import ask
from daccore.settings.config import load_config
made = []  # the credential's share of each ack (libmunge in-process, or the munge program)
def timed(payload, socket_path, make=user_client.credential_for):
    t = time.perf_counter()
    try:
        return make(payload, socket_path)
    finally:
        made.append((time.perf_counter() - t) * 1000)
user_client.credential_for = timed
count, out = int(sys.argv[2 + n]), sys.argv[3 + n]
config = load_config(os.environ["DAC_CONFIG"])
src = os.environ["DW_JOB_STRIPED"] + "/small"
open(src, "wb").write(b"x" * 4096)
job, node = os.environ["SLURM_JOB_ID"], os.environ["SLURMD_NODENAME"]
samples, credentials = [], []
for i in range(count):
    args = dict(job=job, node=node, direction="out", type="file", source=src,
                destination=f"{os.path.dirname(out)}/acks/small.{i}")
    t = time.perf_counter()
    s = ask(config, "stage-start", args)
    samples.append((time.perf_counter() - t) * 1000)
    cred = made[-1]
    while not ask(config, "stage-wait", dict(job=job, ids=[s["id"]], timeout=30))["done"]:
        pass
    credentials.append(cred)
json.dump({"acks": samples, "credential": credentials}, open(out, "w"))
"""


def _sbatch(env: dict, jobs: Path, name: str, script: str) -> str:
    from daclocal.slurm import SUBMIT_USER

    path = jobs / f"{name}.sh"
    path.write_text(script)
    path.chmod(0o644)
    r = subprocess.run(
        ["runuser", "-u", SUBMIT_USER, "--", "sbatch", "--parsable", str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=jobs,
    )
    if r.returncode:
        raise SystemExit(f"sbatch {name}: {r.stderr.strip()}")
    return r.stdout.strip().split(";")[0]


def _wait(env: dict, job: str, timeout: float) -> None:
    """Until Slurm has forgotten the job or shows it ended with its buffer torn down."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["scontrol", "show", "job", job], capture_output=True, text=True, env=env
        ).stdout
        ended = any(f"JobState={s}" in out for s in ("COMPLETED", "FAILED", "CANCELLED"))
        if not out or (ended and "BurstBufferState=teardown" not in out):
            return
        time.sleep(1)
    raise SystemExit(f"job {job} did not end within {timeout:.0f} s")


def _header(capacity_gib: int) -> str:
    return (
        "#!/bin/bash\n#SBATCH -N 1\n"
        f"#DW jobdw capacity={capacity_gib}GiB access_mode=striped type=scratch pool=default\n"
    )


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=200, help="stage-starts timed")
    p.add_argument("--size-mib", type=int, default=1024, help="each checkpoint")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between checkpoints")
    p.add_argument("--duration", type=float, default=120.0, help="seconds the job computes")
    p.add_argument("--brick-gib", type=int, default=4)
    p.add_argument("--acks-only", action="store_true", help="time the acks, not the drains")
    a = p.parse_args(argv)
    count = max(1, round(a.duration / a.interval))
    need = -(-count * a.size_mib // 1024) + 1  # every checkpoint stays in the buffer
    if need > 4 * a.brick_gib:
        raise SystemExit(
            f"{count} checkpoints of {a.size_mib} MiB need --brick-gib {need // 4 + 1}"
        )
    from security.injob_client import client_argv  # the launcher's interpreter and paths

    from daccore.share import asset
    from daclocal.slurm import ensure_submit_user

    user = ensure_submit_user()
    with local_dac(
        servers=1, bricks_per_server=4, brick_size=a.brick_gib << 30, release="22.05"
    ) as (
        state,
        env,
        work,
    ):
        workdir = Path(state.workdir)
        for line in subprocess.run(
            [sys.executable, "-m", "dacctl.main", "local", "env", "--workdir", str(workdir)],
            capture_output=True,
            text=True,
            env=env,
        ).stdout.splitlines():
            k, _, v = line.removeprefix("export ").partition("=")
            env[k] = os.path.expandvars(v)
        jobs = work / "jobs"
        jobs.mkdir()
        os.chown(jobs, user.pw_uid, user.pw_gid)
        build = work / "cbuild"
        subprocess.run(
            ["make", "-s", "-C", str(asset("libdacstage", directory=True)), f"OUT={build}"],
            check=True,
        )
        (build).chmod(0o755)
        dacctl = workdir / "bin" / "dacctl"
        launcher = client_argv(workdir)  # python -I -S -c BOOT N DIR...
        capacity = need

        # 1. acks
        acks = jobs / "acks.json"
        boot = shlex.join([*launcher[:4], _ACKS, *launcher[5:]])
        job = _sbatch(
            env,
            jobs,
            "acks",
            _header(1) + f"mkdir -p {jobs}/acks\n{boot} {a.n} {acks}\n",
        )
        _wait(env, job, 600)
        timed = json.loads(acks.read_text())
        samples = timed["acks"]
        print(f"ack (stage-start round trip from a compute node): {percentiles(samples)}")
        print(f"  of which the client's munge credential: {percentiles(timed['credential'])}")
        slow = sorted(range(len(samples)), key=lambda i: -samples[i])[:5]
        print(
            "  slowest (request number: ms): " + ", ".join(f"{i}: {samples[i]:.1f}" for i in slow)
        )
        if a.acks_only:
            return verdict("ack p99", p99(samples), ACK_BUDGET_MS)

        # 2. the same job without drains, then with them
        walls = {}
        for mode in ("none", "drain"):
            out = jobs / mode
            body = (
                f"mkdir -p {out}\nexport DACCTL={dacctl}\n"
                f"t0=$(date +%s.%N)\n"
                f"{build}/checkpoint {out} {count} {a.size_mib} {a.interval}"
                f"{' none' if mode == 'none' else ''} > {out}.log 2>&1 "
                f"|| echo failed >> {out}.log\n"
                f't1=$(date +%s.%N)\necho "$t0 $t1" > {out}.wall\n'
            )
            if mode == "drain":
                # then the rate, the same file size both ways, each freshly written (its dirty
                # pages still going to the disk, as each checkpoint's are when its drain
                # starts), ROUNDS times, the order alternating round by round (whichever goes
                # second finds the disk busy with the first's writeback): a drain (its
                # running time, from its status), and cp followed by sync of the copy
                drain = (
                    f"  head -c {a.size_mib}M /dev/zero > $DW_JOB_STRIPED/r.$k\n"
                    f"  {dacctl} stage out $DW_JOB_STRIPED/r.$k {out}/r.$k --json > {out}.r.$k\n"
                    f"  {dacctl} stage wait --all --json > {out}.rw.$k\n"
                )
                cp = (
                    f"  head -c {a.size_mib}M /dev/zero > $DW_JOB_STRIPED/c.$k\n"
                    f"  c0=$(date +%s.%N); cp $DW_JOB_STRIPED/c.$k {out}/c.$k\n"
                    f"  c1=$(date +%s.%N); sync {out}/c.$k; c2=$(date +%s.%N)\n"
                    f'  echo "$c0 $c1 $c2" >> {out}.cp\n'
                )
                body += (
                    f"{dacctl} stage list --json > {out}.stages\n"
                    f"for i in $(seq 1 {count}); do cmp $DW_JOB_STRIPED/ckpt.$i {out}/ckpt.$i "
                    f"|| echo ckpt.$i >> {out}.differ; done\n"
                    f"rm -f $DW_JOB_STRIPED/ckpt.*\n"
                    f"for k in $(seq 1 {ROUNDS}); do\n"
                    f"  if [ $((k % 2)) = 1 ]; then\n{drain}{cp}  else\n{cp}{drain}  fi\n"
                    f"  rm -f $DW_JOB_STRIPED/r.$k $DW_JOB_STRIPED/c.$k {out}/r.$k {out}/c.$k\n"
                    f"done\n"
                )
            job = _sbatch(env, jobs, mode, _header(capacity) + body)
            _wait(env, job, a.duration * 3 + 600)
            t0, t1 = map(float, (jobs / f"{mode}.wall").read_text().split())
            walls[mode] = t1 - t0
            log = (jobs / f"{mode}.log").read_text()
            if "failed" in log.splitlines()[-1:]:
                raise SystemExit(f"the {mode} job failed: {log}")
        ratio = walls["drain"] / walls["none"]
        print(
            f"checkpoint job: {count} x {a.size_mib} MiB every {a.interval:g} s: "
            f"{walls['none']:.1f} s without drains, {walls['drain']:.1f} s draining each "
            f"({ratio:.3f}x)"
        )
        differ = (
            (jobs / "drain.differ").read_text().split() if (jobs / "drain.differ").exists() else []
        )
        files = sorted(p.name for p in (jobs / "drain").glob("ckpt.*"))
        whole = not differ and len(files) == count
        print(f"checkpoints on the destination byte for byte: {len(files) - len(differ)}/{count}")
        size = a.size_mib << 20
        rounds = range(1, ROUNDS + 1)
        ids = [json.loads((jobs / f"drain.r.{k}").read_text())["id"] for k in rounds]
        ended = {
            s["id"]: s for k in rounds for s in json.loads((jobs / f"drain.rw.{k}").read_text())
        }
        rates = sorted(
            size / (ended[i]["ended_at"] - ended[i]["started_at"])
            for i in ids
            if ended[i]["state"] == "done"
        )
        cps = [
            tuple(map(float, line.split()))
            for line in (jobs / "drain.cp").read_text().split("\n")
            if line
        ]
        cp_sync = statistics.median(size / (c2 - c0) for c0, _, c2 in cps)
        cp_alone = statistics.median(size / (c1 - c0) for c0, c1, _ in cps)
        drain_rate = statistics.median(rates) if len(rates) == ROUNDS else 0.0
        during = json.loads((jobs / "drain.stages").read_text())
        running = sorted(
            s["bytes_done"] / (s["ended_at"] - s["started_at"])
            for s in during
            if s["state"] == "done" and s["ended_at"] > s["started_at"]
        )
        print(
            f"drain rate (median of {ROUNDS}) {drain_rate / 2**20:.0f} MiB/s; cp + sync "
            f"{cp_sync / 2**20:.0f} MiB/s ({drain_rate / cp_sync:.2f}x); cp alone "
            f"{cp_alone / 2**20:.0f} MiB/s ({drain_rate / cp_alone:.2f}x); the checkpoints' "
            f"drains while the job ran: median {running[len(running) // 2] / 2**20:.0f} MiB/s"
        )
    status = verdict("ack p99", p99(samples), ACK_BUDGET_MS)
    ok = ratio <= WALL_BUDGET and whole
    print(
        f"drain job {ratio:.3f}x of the job without, budget {WALL_BUDGET}x, all checkpoints "
        f"whole: {'PASS' if ok else 'FAIL'}"
    )
    ok_rate = drain_rate / cp_sync >= RATE_BUDGET
    print(
        f"drain {drain_rate / cp_sync:.2f}x cp + sync, budget {RATE_BUDGET}x: "
        f"{'PASS' if ok_rate else 'FAIL'}"
    )
    return status or (0 if ok and ok_rate else 1)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    sys.exit(main(sys.argv[1:]))
