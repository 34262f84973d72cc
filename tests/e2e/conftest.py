"""A real Slurm (two slurmd on this machine) wired to a local DAC, once per release and burst
buffer plugin. Jobs are submitted as an unprivileged user: Slurm refuses burst buffers to root.

Releases: the host's own 22.05 runs every test; 24.11 and 26.05 (from Debian chroots that
`dacctl local up --slurm-release` builds on first use and caches, daclocal/releases.py) run the
tests marked `every_release`, the cases whose behaviour a release can change: a staged 2-node
job, a refused directive with its message, a persistent buffer, bbstat, the pools. Nothing
skips: without Slurm or a chroot that cannot be built (make deps installs what is needed),
these tests fail."""

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from clitools import run

from daclocal.etcd_releases import ETCD_RELEASES, HOST_ETCD
from daclocal.releases import HOST_RELEASE, RELEASES
from daclocal.slurm import PLUGINS, SUBMIT_USER, ensure_submit_user


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "every_release: run on every Slurm release, not only the host's own"
    )
    config.addinivalue_line(
        "markers", "every_etcd: also run on etcd 3.5 and 3.6 (the host's Slurm, burst_buffer/lua)"
    )
    config.addinivalue_line(
        "markers", "lua_only: burst_buffer/lua alone (dac's answerer: datawarp forks dacctl itself)"
    )
    config.addinivalue_line(
        "markers", "datawarp_only: burst_buffer/datawarp alone (its GetSysState forwarder)"
    )


def pytest_generate_tests(metafunc):
    """`slurm` once per (release, plugin, etcd): every release for tests marked every_release,
    the host's own for the rest, all on the host's etcd 3.4; tests marked every_etcd also on
    etcd 3.5 and 3.6."""
    if "slurm" not in metafunc.fixturenames:
        return
    every = metafunc.definition.get_closest_marker("every_release") is not None
    plugins = ["lua"] if metafunc.definition.get_closest_marker("lua_only") else PLUGINS
    if metafunc.definition.get_closest_marker("datawarp_only"):
        plugins = ["datawarp"]
    params = [(r, p, HOST_ETCD) for r in (RELEASES if every else [HOST_RELEASE]) for p in plugins]
    if metafunc.definition.get_closest_marker("every_etcd") is not None:
        params += [(HOST_RELEASE, "lua", e) for e in ETCD_RELEASES if e != HOST_ETCD]
    metafunc.parametrize(
        "slurm",
        params,
        indirect=True,
        scope="session",
        ids=[f"{r}-{p}" + ("" if e == HOST_ETCD else f"-etcd{e}") for r, p, e in params],
    )


class Slurm:
    def __init__(self, env, workdir, plugin, release):
        self.env, self.workdir, self.plugin, self.release = env, workdir, plugin, release
        user = ensure_submit_user()
        self.jobs = tempfile.mkdtemp(prefix=f"dac-e2e-{plugin}-")
        os.chown(self.jobs, user.pw_uid, user.pw_gid)

    def _run(self, argv, **kw):
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=60, env={**os.environ, **self.env}, **kw
        )

    def sbatch(self, script: str):
        """(job id or None, completed process) for `script` submitted as the submit user."""
        path = os.path.join(self.jobs, f"job{time.monotonic_ns()}.sh")
        with open(path, "w") as f:
            f.write(script.replace("@JOBS@", self.jobs))
        os.chmod(path, 0o644)
        r = self._run(
            ["runuser", "-u", SUBMIT_USER, "--", "sbatch", "--parsable", path], cwd=self.jobs
        )
        return (r.stdout.strip().split(";")[0] or None) if r.returncode == 0 else None, r

    def job(self, job_id: str) -> dict:
        out = self._run(["scontrol", "show", "job", job_id]).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait(
        self,
        job_id: str,
        states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"),
        timeout: float = 60,
        remedy_race: bool = False,
        log_id: str = "",
    ) -> dict:
        """The job once it has ended and its burst buffer is torn down (or none was asked).
        With `remedy_race` (a job cancelled while pending or held): Slurm (22.05 to 26.05) may
        kill the teardown that the cancel or a failed setup started (slurmscriptd_flush_job
        racing it, job_mgr.c) and run no other: the job stays BurstBufferState=teardown,
        slurmctld logging "teardown for JobId=N terminated by slurmctld". Once that line is
        there, the remedy docs/slurm.md gives, a slurmctld restart (it runs teardown again for
        such jobs), is applied, and must work within `timeout`. `log_id`: the job's number in
        that line, when `job_id` names a job array's task (`<array>_<index>`)."""
        from daclocal.cluster import restart_slurmctld

        race = f"teardown for JobId={log_id or job_id} terminated by slurmctld"
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job.get("JobState") in states and job.get("BurstBufferState", "complete") in (
                "complete",
                "(null)",
                "",
            ):
                return job
            assert time.monotonic() < deadline, f"job {job_id} stuck: {job}\n{self.logs()}"
            if remedy_race and race in self._slurmctld_log():
                restart_slurmctld(Path(self.workdir))
                remedy_race, deadline = False, time.monotonic() + timeout
            time.sleep(0.2)

    def _slurmctld_log(self) -> str:
        (path,) = glob.glob(os.path.join(self.workdir, "*/log/slurmctld.log"))
        with open(path, errors="replace") as f:
            return f.read()

    def logs(self, lines: int = 15) -> str:
        """The last lines of slurmctld's, dacctl's and each dacd's log: what a stuck job's
        failure report needs, since the workdir is gone once the session ends."""
        out = []
        for pattern in ("*/log/slurmctld.log", "*/log/dacctl.log", "logs/dacd-*.log"):
            for path in sorted(glob.glob(os.path.join(self.workdir, pattern))):
                with open(path, errors="replace") as f:
                    tail = f.readlines()[-lines:]
                out.append(f"-- {path}\n{''.join(tail)}")
        return "\n".join(out)

    def scontrol(self, *args: str) -> str:
        return self._run(["scontrol", *args]).stdout


@pytest.fixture(scope="session")
def slurm(request):
    release, plugin, etcd = request.param
    yield from _local_slurm(release, plugin, etcd)


@pytest.fixture(scope="module")
def slurm_forked():
    """The host's Slurm, burst_buffer/lua, without dac's answerer (DAC_LOCAL_ANSWERER=0): every
    hook forks dacctl, the fallback's own path; and burst_buffer.lua's source, not its
    bytecode (DAC_LOCAL_LUA_BYTECODE=0), as a site without `--lua-bytecode` runs it. Every
    other Slurm here runs the answerer and the bytecode (docs/slurm.md, The answerer)."""
    yield from _local_slurm(
        HOST_RELEASE,
        "lua",
        HOST_ETCD,
        up_env={"DAC_LOCAL_ANSWERER": "0", "DAC_LOCAL_LUA_BYTECODE": "0"},
    )


@pytest.fixture(scope="module")
def slurm_etcd3():
    """The host's Slurm, burst_buffer/lua, on three etcd members (quorum can be lost)."""
    yield from _local_slurm(HOST_RELEASE, "lua", HOST_ETCD, "--etcd-members", "3")


def _local_slurm(release: str, plugin: str, etcd: str, *more: str, up_env=None):
    # Not under pytest's tmp dir: that is root-only, and sbatch (run as the submit user) must
    # read slurm.conf in here.
    workdir = tempfile.mkdtemp(prefix=f"dac-e2e-{release}-{plugin}-")
    os.chmod(workdir, 0o755)
    # a first use of a release builds its chroot (~30-60 s), within this timeout
    run(
        "dacctl",
        "local",
        "up",
        "--workdir",
        str(workdir),
        "--servers",
        "2",
        "--bricks-per-server",
        "4",
        "--brick-size",
        "512MiB",
        "--slurm-nodes",
        "2",
        "--slurm-plugin",
        plugin,
        "--slurm-release",
        release,
        "--etcd-release",
        etcd,
        *more,
        timeout=900,
        env=up_env,
    )
    try:
        lines = run("dacctl", "local", "env", "--workdir", str(workdir)).stdout.splitlines()
        env = dict(line.removeprefix("export ").split("=", 1) for line in lines)
        env = {k: os.path.expandvars(v) for k, v in env.items()}  # PATH=<release bin>:$PATH
        s = Slurm(env, workdir, plugin, release)
        yield s
    finally:
        pids = _pids(workdir)
        down = run("dacctl", "local", "down", "--workdir", str(workdir), check=False)
        left = _leftovers(workdir, pids)
        shutil.rmtree(workdir, ignore_errors=True)
        if "s" in locals():
            shutil.rmtree(s.jobs, ignore_errors=True)
    # `down` leaves no process, mount or loop device, whichever release ran (a chroot's
    # daemons included)
    assert down.returncode == 0 and not left, (down.stderr, left)


def _pids(workdir: str) -> list[int]:
    try:
        with open(os.path.join(workdir, "state.json")) as f:
            state = json.load(f)
    except OSError:
        return []
    members = state["etcd"].get("members") or [state["etcd"]]
    return [
        *(m.get("pid", 0) for m in members),
        *(d["pid"] for d in state["dacd"]),
        *state["slurm"].get("pids", {}).values(),
        *(state["users"].get(k, 0) for k in ("munged", "service")),
    ]


def _leftovers(workdir: str, pids: list[int]) -> list[str]:
    alive = []
    for pid in filter(None, pids):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(f"process {pid}")
        except OSError:
            pass
    with open("/proc/self/mountinfo") as f:
        mounts = [f"mount {line.split()[4]}" for line in f if workdir + "/" in line]
    loops = []
    for backing in glob.glob("/sys/block/loop*/loop/backing_file"):
        with open(backing) as f:
            if f.read().startswith(workdir + "/"):
                loops.append(f"loop device {backing.split('/')[3]}")
    return alive + mounts + loops
