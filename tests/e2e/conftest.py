"""A real Slurm 22.05 (two slurmd on this machine) wired to a local DAC, once per burst buffer
plugin. Jobs are submitted as an unprivileged user: Slurm refuses burst buffers to root.
Nothing skips: without Slurm (make deps installs it) these tests fail."""

import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest
from clitools import run

from daclocal.slurm import SUBMIT_USER, ensure_submit_user


class Slurm:
    def __init__(self, env, workdir, plugin):
        self.env, self.workdir, self.plugin = env, workdir, plugin
        user = ensure_submit_user()
        self.jobs = tempfile.mkdtemp(prefix=f"dac-e2e-{plugin}-")
        os.chown(self.jobs, user.pw_uid, user.pw_gid)

    def _run(self, argv, **kw):
        return subprocess.run(argv, capture_output=True, text=True, timeout=60,
                              env={**os.environ, **self.env}, **kw)

    def sbatch(self, script: str):
        """(job id or None, completed process) for `script` submitted as the submit user."""
        path = os.path.join(self.jobs, f"job{time.monotonic_ns()}.sh")
        with open(path, "w") as f:
            f.write(script.replace("@JOBS@", self.jobs))
        os.chmod(path, 0o644)
        r = self._run(["runuser", "-u", SUBMIT_USER, "--", "sbatch", "--parsable", path],
                      cwd=self.jobs)
        return (r.stdout.strip().split(";")[0] or None) if r.returncode == 0 else None, r

    def job(self, job_id: str) -> dict:
        out = self._run(["scontrol", "show", "job", job_id]).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait(self, job_id: str, states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"),
             timeout: float = 60) -> dict:
        """The job once it has ended and its burst buffer is torn down (or none was asked)."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job.get("JobState") in states and \
                    job.get("BurstBufferState", "complete") in ("complete", "(null)", ""):
                return job
            assert time.monotonic() < deadline, f"job {job_id} stuck: {job}"
            time.sleep(0.2)

    def scontrol(self, *args: str) -> str:
        return self._run(["scontrol", *args]).stdout


@pytest.fixture(scope="session", params=["lua", "datawarp"])
def slurm(request):
    # Not under pytest's tmp dir: that is root-only, and sbatch (run as the submit user) must
    # read slurm.conf in here.
    workdir = tempfile.mkdtemp(prefix=f"dac-e2e-{request.param}-")
    os.chmod(workdir, 0o755)
    run("dacctl", "local", "up", "--workdir", str(workdir), "--servers", "2",
        "--bricks-per-server", "4", "--brick-size", "512MiB", "--slurm-nodes", "2",
        "--slurm-plugin", request.param, timeout=120)
    try:
        lines = run("dacctl", "local", "env", "--workdir", str(workdir)).stdout.splitlines()
        env = dict(line.removeprefix("export ").split("=", 1) for line in lines)
        s = Slurm(env, workdir, request.param)
        yield s
    finally:
        run("dacctl", "local", "down", "--workdir", str(workdir), check=False)
        shutil.rmtree(workdir, ignore_errors=True)
        if "s" in locals():
            shutil.rmtree(s.jobs, ignore_errors=True)
