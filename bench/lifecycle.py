"""Budget: control-plane overhead of one local-backend lifecycle <= 3 s.

Overhead = wall time of Slurm's calls for one job (setup, data_in, paths, pre_run on 2 nodes,
post_run, data_out, teardown, each `dacctl --function ...` waiting for dacd as under Slurm)
minus the wall time of the same filesystem work done by hand on the same kind of brick in the
same run: mkfs.xfs, mount, the job's directories, 4 bind mounts (striped + private on 2 nodes),
their unmounts, umount, blkdiscard --zeroout (the wipe). Rounds alternate the two so drift
hits both alike.

    .venv/bin/python bench/lifecycle.py [--slurm-release 22.05|24.11|26.05]

With a release (or DAC_BENCH_SLURM_RELEASE), the local DAC also runs that release's Slurm and
every call runs as its slurmctld runs a hook: 24.11 and 26.05 in their chroot's namespace, as
SlurmUser slurm (bench/common.py as_slurm).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import as_slurm, local_dac, slurm_release, steal_meter  # noqa: E402

from daclocal import loopdev  # noqa: E402

BUDGET_S = 3.0
ROUNDS = 5
UID = GID = 4000
FUNCTIONS = ("setup", "data_in", "paths", "pre_run", "post_run", "data_out", "teardown")


def dac_lifecycle(
    dacctl: str, env: dict, work: Path, job: int, prefix: list[str]
) -> dict[str, float]:
    script = work / "job.sh"
    script.write_text(
        "#!/bin/sh\n#DW jobdw capacity=512MiB access_mode=striped,private pool=default\n"
    )
    nodes = work / "nodes.txt"
    nodes.write_text("node1\nnode2\n")
    args = {
        "setup": [
            "--caller",
            "SLURM",
            "--user",
            str(UID),
            "--groupid",
            str(GID),
            "--capacity",
            "default:512MiB",
        ],
        "paths": ["--pathfile", str(work / "paths")],
        "pre_run": ["--nodehostnamefile", str(nodes)],
    }
    times = {}
    for f in FUNCTIONS:
        t = time.perf_counter()
        r = subprocess.run(
            [
                *prefix,
                dacctl,
                "--function",
                f,
                "--token",
                str(job),
                "--job",
                str(script),
                *args.get(f, []),
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        times[f] = time.perf_counter() - t
        assert r.returncode == 0, (f, r.stdout, r.stderr)
    return times


def by_hand(device: str, work: Path) -> float:
    fs, roots = work / "byhand", [work / "byhand-node1", work / "byhand-node2"]
    t = time.perf_counter()

    def run(*argv: str) -> None:
        subprocess.run(argv, check=True, capture_output=True)

    run("mkfs.xfs", "-f", "-q", device)
    fs.mkdir()
    run("mount", "-o", "nodev,nosuid", device, str(fs))
    for d in ("striped", "private", "private/node1", "private/node2"):
        (fs / d).mkdir()
        os.chown(fs / d, UID, GID)
        os.chmod(fs / d, 0o700)
    binds = []
    for i, root in enumerate(roots, 1):
        for kind, source in (("striped", fs / "striped"), ("private", fs / "private" / f"node{i}")):
            target = root / kind
            target.mkdir(parents=True)
            run("mount", "--bind", str(source), str(target))
            binds.append(target)
    for target in binds:
        run("umount", str(target))
        target.rmdir()
    run("umount", str(fs))
    run("blkdiscard", "--zeroout", device)
    fs.rmdir()
    for root in roots:
        root.rmdir()
    return time.perf_counter() - t


def main() -> int:
    dacctl = str(Path(sys.executable).parent / "dacctl")
    release = slurm_release(sys.argv[1:])
    with local_dac(servers=1, bricks_per_server=1, release=release) as (state, env, work):
        prefix, files = as_slurm(state, work)
        # the by-hand work gets a loop device of its own, like the local DAC's bricks
        img = work / "byhand.img"
        device = loopdev.attach(img, 512 << 20)
        try:
            cpu = steal_meter()
            dac: list[float] = []
            hand: list[float] = []
            per_function: dict[str, list[float]] = {f: [] for f in FUNCTIONS}
            for i in range(ROUNDS):
                times = dac_lifecycle(dacctl, env, files, 100 + i, prefix)
                for f, s in times.items():
                    per_function[f].append(s)
                dac.append(sum(times.values()))
                hand.append(by_hand(device, work))
        finally:
            loopdev.detach(device, img)
    overhead = statistics.median(dac) - statistics.median(hand)
    for f, samples in per_function.items():
        print(f"  {f:9s} median {statistics.median(samples):5.2f} s")
    if release:
        print(f"Slurm {release}: calls run as its slurmctld runs the hooks")
    print(
        f"dac lifecycle median {statistics.median(dac):.2f} s (min {min(dac):.2f}), by hand "
        f"median {statistics.median(hand):.2f} s (min {min(hand):.2f}), {ROUNDS} rounds"
    )
    print(cpu())
    ok = overhead <= BUDGET_S
    print(
        f"control-plane overhead {overhead:.2f} s, budget {BUDGET_S:.0f} s: "
        f"{'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
