"""Shared by the benchmarks: a throwaway etcd, percentiles, a big synthetic inventory."""

from __future__ import annotations

import random
import statistics
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from daccore.etcd.auth import Credential
from daccore.etcd.client import EtcdClient
from daccore.records.models import Brick, Host, Pool
from daccore.rules.inventory import BrickInfo, HostInfo, Inventory, PoolInfo
from daccore.store import Store
from daclocal.etcd_server import EtcdServer

TIB = 1 << 40


def slurm_release(argv: list[str]) -> str | None:
    """`--slurm-release R` from the bench's arguments, else $DAC_BENCH_SLURM_RELEASE: run the
    Slurm calls as that release's slurmctld runs its hooks (`as_slurm`)."""
    import os

    if "--slurm-release" in argv:
        i = argv.index("--slurm-release")
        if i + 1 < len(argv):
            return argv[i + 1]
        raise SystemExit("--slurm-release needs 22.05, 24.11 or 26.05")
    return os.environ.get("DAC_BENCH_SLURM_RELEASE") or None


@contextmanager
def local_dac(
    servers: int = 2,
    bricks_per_server: int = 4,
    brick_size: int = 512 << 20,
    release: str | None = None,
    etcd_members: int = 1,
    plugin: str = "lua",
):
    """A local DAC in a throwaway directory users can enter, on `etcd_members` etcd members;
    yields (state, env for dac's commands, workdir). With `release`, also a 2-node Slurm of
    that release (burst_buffer/`plugin`, lua unless told) whose hooks' way of running dacctl
    `as_slurm` reproduces. Needs root."""
    import os

    from daclocal import cluster

    with tempfile.TemporaryDirectory(prefix="dac-bench-") as d:
        work = Path(d)
        work.chmod(0o755)  # jobs enter the local DAC's workdir as their user
        slurm: dict[str, Any] = (
            {"slurm_nodes": 2, "slurm_plugin": plugin, "slurm_release": release} if release else {}
        )
        state = cluster.up(
            work / "dac",
            servers=servers,
            bricks_per_server=bricks_per_server,
            brick_size=brick_size,
            timeout=60,
            etcd_members=etcd_members,
            **slurm,
        )
        try:
            env = {**os.environ, "DAC_CONFIG": str(state.config_path)}
            env.pop("DAC_ETCD_ENDPOINTS", None)
            yield state, env, work
        finally:
            cluster.down(work / "dac")


def as_slurm(state, work: Path) -> tuple[list[str], Path]:
    """(argv prefix, directory for Slurm's files) to run a command as the local DAC's
    slurmctld runs a hook: in its mount namespace and root (a chroot release's), as its
    SlurmUser. The directory is SlurmUser's, as StateSaveLocation is."""
    import os
    import pwd

    from daclocal.slurm import SlurmCluster

    files = work / "slurm-files"
    files.mkdir(mode=0o755, exist_ok=True)
    if not state.slurm:
        return [], files
    cluster = SlurmCluster(
        Path(state.workdir), state.slurm["nodes"], release=state.slurm.get("release", "22.05")
    )
    pw = pwd.getpwnam(cluster.release.slurm_user)
    os.chown(files, pw.pw_uid, pw.pw_gid)
    if cluster.release.host:
        return [], files  # root, on the host, like the 22.05 slurmctld here
    pid = str(state.slurm["pids"]["slurmctld"])
    return (
        [
            "nsenter",
            "--target",
            pid,
            "--mount",
            "--root",
            "--wd=/",
            f"--setgid={pw.pw_gid}",
            f"--setuid={pw.pw_uid}",
            "--",
        ],
        files,
    )


#: the hot-path benches' job: two nodes, a 100 MiB buffer, a stage each way
HOT_SCRIPT = """#!/bin/bash
#SBATCH -N 2
#SBATCH -t 10
#DW jobdw capacity=100MiB access_mode=striped type=scratch pool=default
#DW stage_in type=directory source=/home/alice/in destination=$DW_JOB_STRIPED/in
#DW stage_out type=directory source=$DW_JOB_STRIPED/out destination=/home/alice/out
srun ./simulate
"""


def hot_job(dacctl: str, env: dict, work: Path, prefix: list[str] | None = None) -> Path:
    """HOT_SCRIPT written to `work`/job.sh and its buffer made, as Slurm's setup makes it
    (job 7, uid 1000), so `paths` has a buffer to read; the script's path."""
    import subprocess

    script = work / "job.sh"
    script.write_text(HOT_SCRIPT)
    subprocess.run(
        [
            *(prefix or []),
            dacctl,
            *("--function", "setup", "--token", "7", "--caller", "SLURM"),
            *("--user", "1000", "--groupid", "1000", "--capacity", "default:100MiB"),
            *("--job", str(script)),
        ],
        env=env,
        check=True,
    )
    return script


def many_jobs(env: dict, work: Path, function: str, jobs: int) -> list:
    """Run `dacctl --function <function>` for jobs 1..jobs all at once, as Slurm would for that
    many jobs, each asking for one 512 MiB striped buffer; the completed processes, in order."""
    import subprocess
    import sys

    script = work / "job.sh"
    script.write_text("#!/bin/sh\n#DW jobdw capacity=512MiB access_mode=striped pool=default\n")
    extra = (
        ["--caller", "SLURM", "--user", "4000", "--groupid", "4000"] if function == "setup" else []
    )
    procs = [
        subprocess.Popen(
            [
                str(Path(sys.executable).parent / "dacctl"),
                "--function",
                function,
                "--token",
                str(job),
                "--job",
                str(script),
                *extra,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for job in range(1, jobs + 1)
    ]
    return [subprocess.CompletedProcess(p.args, p.wait(), *p.communicate()) for p in procs]


@contextmanager
def etcd_store(prefix: str = "/bench/"):
    with tempfile.TemporaryDirectory(prefix="dac-bench-") as d:
        # secure, as a site's etcd is: TLS with client certificates, RBAC (admin, on prefix)
        server = EtcdServer(Path(d), extra_grants={"admin": [("readwrite", prefix)]}).start()
        s = server.settings()
        try:
            yield Store(
                EtcdClient(
                    s["endpoints"],
                    cacert=s["cacert"],
                    cert=s["cert"],
                    key=s["key"],
                    timeout=10,
                    credential=Credential(f"{s['credentials_dir']}/admin", "admin"),
                ),
                prefix,
            )
        finally:
            server.stop()


def steal_meter():
    """Returns a function that says how much CPU the hypervisor stole since this call: on a
    shared VM, wall-clock figures swing 2x with it (seen here: 25 % stolen during one run)."""

    def read() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        return fields[7] if len(fields) > 7 else 0, sum(fields)

    steal0, total0 = read()

    def report() -> str:
        steal, total = read()
        share = (steal - steal0) / max(1, total - total0)
        return f"CPU stolen by the hypervisor meanwhile: {share:.0%}"

    return report


def p99(samples_ms: list[float]) -> float:
    s = sorted(samples_ms)
    return s[round(0.99 * (len(s) - 1))]


def percentiles(samples_ms: list[float]) -> str:
    s = sorted(samples_ms)
    return f"n={len(s)} median={statistics.median(s):.1f} ms p99={p99(s):.1f} ms max={s[-1]:.1f} ms"


def verdict(label: str, value_ms: float, budget_ms: float) -> int:
    """Print PASS/FAIL against the budget; the exit code for main()."""
    ok = value_ms <= budget_ms
    print(f"{label} {value_ms:.1f} ms, budget {budget_ms:.0f} ms: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def host_records(hosts: int, bricks: int, pool: str = "default") -> list[Host]:
    """`hosts` servers with `bricks` NVMe each, 2 sockets, 4 PCIe switches per socket."""
    return [
        Host(
            name=f"dac{h:04d}",
            bricks=[
                Brick(
                    name=f"nvme{b}n1",
                    device=f"/dev/nvme{b}n1",
                    capacity=TIB,
                    pool=pool,
                    socket=b % 2,
                    pcie_switch=f"s{b % 2}-{(b // 2) % 4}",
                )
                for b in range(bricks)
            ],
        )
        for h in range(hosts)
    ]


def synthetic_inventory(
    hosts: int, bricks: int, claimed_fraction: float, placement: str, seed: int = 1
) -> Inventory:
    rng = random.Random(seed)
    host_infos, claimed = {}, {}
    for rec in host_records(hosts, bricks):
        infos = [
            BrickInfo(rec.name, b.name, b.device, b.capacity, b.pool, b.socket, b.pcie_switch)
            for b in rec.bricks
        ]
        host_infos[rec.name] = HostInfo(rec.name, True, False, infos)
        for b in infos:
            if rng.random() < claimed_fraction:
                claimed[(b.host, b.name)] = "x"
    return Inventory(
        {"default": PoolInfo("default", TIB, "lustre", placement)}, host_infos, claimed
    )


def pool_record(placement: str = "across_servers") -> Pool:
    return Pool(name="default", granularity=TIB, backend="lustre", placement=placement)
