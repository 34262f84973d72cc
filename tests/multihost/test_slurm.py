"""A real Slurm across the multi-host site: slurmctld on the controller (the bridge address),
a slurmd in each compute node's namespaces (its own hostname and address), burst_buffer/lua
and burst_buffer/datawarp calling dacctl, one at a time; a user's staged 2-node job, submitted
with `sbatch`, whose nodes each write into $DW_JOB_STRIPED (each from its own namespace: its
hostname is in what it writes) and whose output is staged out by the primary server's dacd."""

import os
import pwd
import re
import socket
import subprocess
import time

import pytest
from clitools import pools
from multihost_site import booted

from daclocal.slurm import PLUGINS, SUBMIT_USER, SlurmCluster

pytestmark = pytest.mark.slurm  # beside the multihost suite's etcd and root (tests/conftest.py)

JOB = """#!/bin/bash
#SBATCH -N 2
#SBATCH -o {jobs}/out-%j.txt
#DW jobdw capacity=200GiB access_mode=striped pool=p
#DW stage_out source=$DW_JOB_STRIPED/out destination={jobs}/staged-out type=directory
mkdir -p "$DW_JOB_STRIPED/out"
srun bash -c 'echo "$(uname -n) $(id -un)" > "$DW_JOB_STRIPED/out/$SLURMD_NODENAME"'
echo "seen: $(cat "$DW_JOB_STRIPED"/out/* | tr '\\n' ,)"
"""


class SiteSlurm(SlurmCluster):
    """Slurm on the site's hosts: slurmctld here, the controller; each slurmd entered into
    its compute node's namespaces, and there in a mount namespace of its own where the
    node's `node_root` is seen at `mount_root` (the path $DW_JOB_STRIPED names)."""

    def __init__(self, site, workdir, plugin: str, dac_config: str, mount_root: str):
        super().__init__(
            workdir,
            nodes=len(site.nodes),
            plugin=plugin,
            dac_config=dac_config,
            mount_root=mount_root,
            node_roots=str(site.recorded.root / "nodes"),
        )
        self.site = site

    def _write_configs(self) -> None:
        super()._write_configs()
        text = self.conf.read_text().replace(
            "SlurmctldHost=localhost",
            f"SlurmctldHost={socket.gethostname().split('.')[0]}({self.site.controller})",
        )
        for host in self.site.nodes:
            text = re.sub(
                rf"NodeName={host.name} NodeHostname=localhost NodeAddr=127.0.0.1 "
                r"Port=\d+",
                f"NodeName={host.name} NodeHostname={host.name} NodeAddr={host.address} Port=6818",
                text,
            )
        self.conf.write_text(text)

    def _slurmd_argv(self, node: str) -> list[str]:
        # `ip netns exec` gave the node a sysfs of its network namespace, without the cgroup
        # hierarchies slurmd 22.05 needs (it has no cgroup plugin `disabled`): the machine's
        # mounted there again, as this process sees them
        return [
            *self.site.hosts[node].enter,
            "sh",
            "-c",
            f'mountpoint -q /sys/fs/cgroup || {{ {cgroup_mounts()}; }} && exec "$@"',
            "sh",
            *super()._slurmd_argv(node),
        ]


def cgroup_mounts() -> str:
    """The shell commands that mount this machine's cgroup filesystems (a tmpfs and v1
    hierarchies, or cgroup2) as they are mounted here."""
    steps = []
    with open("/proc/self/mounts") as f:
        for source, point, fstype, options, *_ in (line.split() for line in f):
            if point == "/sys/fs/cgroup" or point.startswith("/sys/fs/cgroup/"):
                steps.append(f"mkdir -p {point} && mount -t {fstype} -o {options} {source} {point}")
    return " && ".join(steps) or "true"


@pytest.fixture(scope="module")
def site_for_slurm():
    """A site whose nodes' jobs see their mounts at <root>/mnt (mount_root), and a directory
    of the submit user's for job scripts, output and what is staged out."""
    with booted(lambda root: {"mount_root": str(root / "mnt")}) as (site, env, store):
        (site.root / "mnt").mkdir()
        jobs = site.root / "jobs"
        jobs.mkdir()
        user = pwd.getpwnam(SUBMIT_USER)  # made by daclocal.slurm.ensure_submit_user
        os.chown(jobs, user.pw_uid, user.pw_gid)
        yield site, env, store, jobs


@pytest.fixture(scope="module", params=PLUGINS)
def slurm_site(request, site_for_slurm):
    """Slurm with burst_buffer/<plugin> on the site; one at a time."""
    site, env, store, jobs = site_for_slurm
    workdir = site.root / f"slurm-{request.param}"
    workdir.mkdir()
    workdir.chmod(0o755)  # sbatch, as the user, reads slurm.conf in there
    cluster = SiteSlurm(site, workdir, request.param, env["DAC_CONFIG"], str(site.root / "mnt"))
    try:
        try:
            cluster.start(timeout=60)
        except Exception as e:
            raise AssertionError(f"{e}\n{logs(cluster)}") from e
        yield site, env, store, cluster, jobs
    finally:
        cluster.stop()


def logs(cluster, lines: int = 10) -> str:
    """The last lines of each Slurm daemon's log and the hooks' log: what a failure shows."""
    return "\n".join(
        f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-lines:])
        for p in sorted((cluster.base / "log").iterdir())
        if p.is_file()
    )


def slurm_cmd(cluster, *argv: str, user: str | None = None) -> subprocess.CompletedProcess:
    prefix = ["runuser", "-u", user, "--"] if user else []
    return subprocess.run(
        [*prefix, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **cluster.env()},
    )


def wait_job(cluster, job_id: str, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        out = slurm_cmd(cluster, "scontrol", "show", "job", "-o", job_id).stdout
        job = dict(f.split("=", 1) for f in out.split() if "=" in f)
        if job.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") and job.get(
            "BurstBufferState", "complete"
        ) in ("complete", "teardown-complete"):
            return job
        assert time.monotonic() < deadline, out
        time.sleep(1)


def test_mh_slurm_a_staged_2_node_job_writes_on_both_nodes_and_is_staged_out(slurm_site):
    site, env, store, cluster, jobs = slurm_site
    user = pwd.getpwnam(SUBMIT_USER)
    jobs = jobs / cluster.plugin
    jobs.mkdir()
    os.chown(jobs, user.pw_uid, user.pw_gid)
    script = jobs / "job.sh"
    script.write_text(JOB.format(jobs=jobs))
    script.chmod(0o644)
    r = slurm_cmd(cluster, "sbatch", "--parsable", str(script), user=SUBMIT_USER)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().split(";")[0]
    job = wait_job(cluster, job_id)
    assert job["JobState"] == "COMPLETED", job
    out = (jobs / f"out-{job_id}.txt").read_text()
    assert f"seen: node1 {SUBMIT_USER},node2 {SUBMIT_USER}," in out, out
    staged = jobs / "staged-out"
    assert sorted(p.name for p in staged.iterdir()) == ["node1", "node2"]
    for node in ("node1", "node2"):
        assert (staged / node).read_text() == f"{node} {SUBMIT_USER}\n"
        assert (staged / node).stat().st_uid == user.pw_uid
    calls = site.recorded.commands()
    assert sorted({c[0] for c in calls if c[1] == "mount" and c[0].startswith("node")}) == [
        "node1",
        "node2",
    ]
    deadline = time.monotonic() + 60
    while pools(env)["p"]["free_bricks"] != 2 or store.buffer(job_id) is not None:
        assert time.monotonic() < deadline, pools(env)
        time.sleep(0.5)
