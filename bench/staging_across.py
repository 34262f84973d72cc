"""A stage split across dacds (issue 35), end to end through Slurm's calls on the local DAC: the
same source staged in by a buffer on one server (today's single copier) and by a buffer across
two servers (the primary's lead and finish, the other server's dacd copying its share), each
server's copiers capped at RATE bytes a second (DAC_BENCH_RATE, the bench's token bucket), so
the two servers' bandwidth adds up as two real servers' would. What it shows beside
`bench/staging.py scaling` (the split copy itself, K copiers on one host): what the
orchestration costs, the record, the wake-ups through etcd, the statuses followed, the finish.

    .venv/bin/python bench/staging_across.py          # root; about 3 min

Knobs: RATE (default 16 MiB/s), FILES and SIZE (default 16 files of 8 MiB), ROUNDS (3).
Each data_in is timed from the call to its return (what a job waits), medians compared.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from daccore.settings.config import load_config
from daccore.store import Store
from daclocal.procs import is_running

MiB = 1 << 20
UID, GID = 1234, 4321
RATE = int(os.environ.get("RATE", str(16 * MiB)))
FILES = int(os.environ.get("FILES", "16"))
SIZE = int(os.environ.get("SIZE", str(8 * MiB)))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
BIN = Path(sys.executable).parent


def run(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [str(BIN / argv[0]), *argv[1:]],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=600,
    )
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stdout}{r.stderr}")
    return r


def until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


def across_servers(workdir: Path, env: dict, store: Store) -> None:
    """The local DAC's pool made to place a buffer across servers, its dacds started again
    with every copier capped at RATE."""
    state = json.loads((workdir / "state.json").read_text())
    for d in state["dacd"]:
        os.kill(d["pid"], signal.SIGTERM)
        until(lambda d=d: not is_running(d["pid"]), 30, f"dacd {d['host']} to stop")
    config = yaml.safe_load((workdir / "dac.yaml").read_text())
    config["pools"]["default"]["placement"] = "across_servers"
    (workdir / "dac.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    store.client.delete(store.keys.pool("default"))
    for d in state["dacd"]:
        log = open(workdir / "logs" / f"dacd-{d['host']}-bench.log", "ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "dacd.main", "--config", env["DAC_CONFIG"], "--host",
             d["host"], "--metrics-address", d["metrics"]],
            stdout=log,
            stderr=log,
            env={**{k: v for k, v in os.environ.items() if k != "DAC_ETCD_ENDPOINTS"},
                 "DAC_BENCH_RATE": str(RATE)},
        )  # fmt: skip
        d["pid"] = proc.pid
    (workdir / "state.json").write_text(json.dumps(state))
    until(lambda: len(store.alive()) == len(state["dacd"]), 60, "the dacds")


def stage_in(env: dict, tmp: Path, job: int, capacity: str, src: Path, store: Store) -> float:
    script = tmp / f"job{job}.sh"
    script.write_text(
        f"#!/bin/sh\n#DW jobdw capacity={capacity} access_mode=striped pool=default\n"
        f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in\n"
    )
    run("dacctl", "--function", "setup", "--token", str(job), "--caller", "SLURM", "--user",
        str(UID), "--groupid", str(GID), "--job", str(script), env=env)  # fmt: skip
    spec = store.buffer(str(job))
    assert spec is not None
    hosts = len(spec.record.allocation.hosts)
    assert hosts == (2 if capacity == "1GiB" else 1), hosts
    subprocess.run(["sync"], check=True)
    started = time.monotonic()
    run("dacctl", "--function", "data_in", "--token", str(job), "--job", str(script), env=env)
    took = time.monotonic() - started
    run("dacctl", "--function", "teardown", "--token", str(job), "--job", str(script), env=env)
    until(lambda: store.buffer(str(job)) is None, 60, "the teardown")
    return took


def main() -> int:
    open_dir = Path(tempfile.mkdtemp(prefix="dac-bench-"))
    open_dir.chmod(0o755)
    workdir = open_dir / "dac"
    run("dacctl", "local", "up", "--workdir", str(workdir), "--servers", "2",
        "--bricks-per-server", "2", "--brick-size", "512MiB")  # fmt: skip
    env = {"DAC_CONFIG": str(workdir / "dac.yaml"), "DAC_ETCD_ENDPOINTS": ""}
    store = Store.from_settings(load_config(env["DAC_CONFIG"], env={}).etcd)
    try:
        across_servers(workdir, env, store)
        src = open_dir / "src"
        src.mkdir(mode=0o755)
        os.chown(src, UID, GID)
        block = os.urandom(SIZE)
        for i in range(FILES):
            path = src / f"f{i:03}"
            path.write_bytes(i.to_bytes(4, "big") + block[4:])
            os.chown(path, UID, GID)
        times: dict[str, list[float]] = {"one server": [], "two servers": []}
        job = 900
        for r in range(ROUNDS):
            order = [("one server", "512MiB"), ("two servers", "1GiB")]
            for name, capacity in order[r % 2 :] + order[: r % 2]:
                job += 1
                times[name].append(stage_in(env, open_dir, job, capacity, src, store))
        total = FILES * SIZE
        one = statistics.median(times["one server"])
        two = statistics.median(times["two servers"])
        print(f"{FILES} files of {SIZE // MiB} MiB, each server capped at {RATE / MiB:g} MiB/s")
        for name, t in times.items():
            print(f"  {name:12} {', '.join(f'{x:.2f}' for x in t)} s")
        print(
            f"  one server {one:.2f} s ({total / one / MiB:.1f} MiB/s), two servers "
            f"{two:.2f} s ({total / two / MiB:.1f} MiB/s): {one / two:.2f}x "
            f"(ideal 2x, less the split's fixed cost)"
        )
    finally:
        subprocess.run([str(BIN / "dacctl"), "local", "down", "--workdir", str(workdir)],
                       capture_output=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
