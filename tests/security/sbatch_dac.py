"""A local DAC wired to a real Slurm with one burst-buffer plugin, and jobs submitted to it by
Slurm's unprivileged submit user: what the sbatch-time attacks share (test_escaping_capacity.py,
test_sbatch_limits.py)."""

import os
import shutil
import subprocess
import tempfile
import time

from clitools import run

from daclocal.slurm import SUBMIT_USER, ensure_submit_user


def slurm_dac(plugin: str, prefix: str):
    """Yields (env, jobs dir the submit user owns, plugin); always torn down."""
    assert os.geteuid() == 0, "needs root (Slurm, loop devices, other uids)"
    workdir = tempfile.mkdtemp(prefix=f"dac-{prefix}-{plugin}-")
    os.chmod(workdir, 0o755)
    jobs = os.path.join(workdir, "jobs")
    try:
        run(
            "dacctl",
            "local",
            "up",
            "--workdir",
            workdir,
            "--servers",
            "2",
            "--bricks-per-server",
            "2",
            "--brick-size",
            "512MiB",
            "--slurm-nodes",
            "1",
            "--slurm-plugin",
            plugin,
            timeout=120,
        )
        lines = run("dacctl", "local", "env", "--workdir", workdir).stdout.splitlines()
        env = dict(line.removeprefix("export ").split("=", 1) for line in lines)
        user = ensure_submit_user()
        os.mkdir(jobs)
        os.chown(jobs, user.pw_uid, user.pw_gid)
        yield env, jobs, plugin
    finally:
        run("dacctl", "local", "down", "--workdir", workdir, check=False)
        shutil.rmtree(workdir, ignore_errors=True)


def script_file(jobs: str, body: str) -> str:
    """A job script in `jobs`: `body` (directive lines), then `sleep 1`."""
    path = os.path.join(jobs, f"job{time.monotonic_ns()}.sh")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"#!/bin/bash\n{body.rstrip(chr(10))}\nsleep 1\n")
    os.chmod(path, 0o644)
    return path


def sbatch(env, jobs: str, body: str):
    """(job id or None, the completed sbatch) as the submit user."""
    r = subprocess.run(
        ["runuser", "-u", SUBMIT_USER, "--", "sbatch", "--parsable", script_file(jobs, body)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=jobs,
        env={**os.environ, **env},
    )
    return (r.stdout.strip().split(";")[0] or None) if r.returncode == 0 else None, r
