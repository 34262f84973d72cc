"""Slurm's own burst-buffer tests (tests/slurm_testsuite.py fetches them) against a local DAC:
one local DAC per release x plugin, shared by that combination's tests, always taken down.

The tests run as Slurm's testsuite runs them, as an unprivileged user (the submit user,
`dacuser`: Slurm refuses burst buffers to root): the expect tests with a `globals.local` naming
the release's client commands, the python test under pytest in atf's local-config mode (it
never reconfigures or restarts Slurm). Nothing skips: a missing `expect`, a fetch that fails or
a DAC that does not come up fails the case.
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import slurm_testsuite
from clitools import BIN, run

from daclocal.slurm import SUBMIT_USER, ensure_submit_user

#: a test's own waits reach 660 s; a passing one takes under a minute here, so a case that
#: has not ended by then has failed
CASE_TIMEOUT = 240


def _processes(sid: int) -> str:
    """The processes of session `sid` and the submit user's anywhere, with their state, what
    they wait in and their kernel stack: a case that outlives its time says why."""
    ps = subprocess.run(
        ["ps", "-e", "-o", "pid,ppid,sid,stat,user:12,wchan:30,args"],
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    mine = [
        line for line in ps[1:] if line.split()[2] == str(sid) or line.split()[4] == SUBMIT_USER
    ]
    stacks = []
    for line in mine:
        pid = line.split()[0]
        try:
            stacks.append(f"-- /proc/{pid}/stack\n" + Path(f"/proc/{pid}/stack").read_text())
        except OSError:
            pass
    return "\n".join(ps[:1] + mine) + "\n" + "".join(stacks)


class SuiteDac:
    """A local DAC with Slurm `release` and `plugin`, and Slurm's tests prepared for it."""

    def __init__(
        self,
        release: str,
        plugin: str,
        workdir: str,
        env: dict[str, str],
        work: Path,
        python_test: str,
    ):
        self.release, self.plugin, self.workdir, self.env = release, plugin, workdir, env
        self.work, self.python_test = work, python_test

    def _as_user(self, argv: list[str], cwd: Path, extra: dict[str, str]) -> tuple[int, str]:
        """(exit status, output) of `argv` run as the submit user, killed whole past
        CASE_TIMEOUT."""
        user = ensure_submit_user()
        env = {
            "PATH": self.env["PATH"],
            "SLURM_CONF": self.env["SLURM_CONF"],
            "HOME": user.pw_dir,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            **extra,
        }
        # output to a file, and the case ends when its process does: what expect spawns runs
        # in sessions of its own and may hold a pipe open
        log = self.work / f"case-{time.monotonic_ns()}.log"
        with open(log, "w+") as out:
            proc = subprocess.Popen(
                [
                    "runuser",
                    "-u",
                    SUBMIT_USER,
                    "--",
                    "env",
                    "-i",
                    *(f"{k}={v}" for k, v in env.items()),
                    *argv,
                ],
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                rc = proc.wait(timeout=CASE_TIMEOUT)
                late = ""
            except subprocess.TimeoutExpired:
                where = _processes(proc.pid)  # what it waited on, before the kill ends it
                os.killpg(proc.pid, 9)
                rc, late = proc.wait(), f"\n(killed: still running after {CASE_TIMEOUT}s)\n{where}"
            out.seek(0)
            return rc, out.read() + late

    def expect(self, test: str) -> tuple[int, str]:
        return self._as_user(
            ["expect", test],
            self.work / "expect",
            {"SLURM_LOCAL_GLOBALS_FILE": str(self.work / "globals.local")},
        )

    def python(self) -> tuple[int, str]:
        name = Path(self.python_test).name
        return self._as_user(
            [
                str(BIN / "python"),
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-v",
                "-rA",
                "--local-config",
                f"--basetemp={self.work / 'pytest-tmp'}",
                f"tests/{name}",
            ],
            self.work / "python",
            {
                "SLURM_TESTSUITE_CONF": str(self.work / "testsuite.conf"),
                "DAC_DACCTL": self.get_sys_state(),
                "DAC_BBSTAT": self.get_sys_state("GetSysStatus", "dac-bbstat"),
            },
        )

    def get_sys_state(self, key: str = "GetSysState", default: str = "dacctl") -> str:
        """What the test's dw_wlm_cli (and, with GetSysStatus, its dwstat) is: burst_buffer.conf's
        GetSysState (dacctl, or dac's forwarder to the answerer where it runs; GetSysStatus:
        dac-bbstat, or its forwarder), as test_datawarp.py checks it is."""
        conf = Path(self.workdir) / "slurm" / "etc" / "burst_buffer.conf"
        for line in conf.read_text().splitlines() if conf.exists() else ():
            if line.startswith(f"{key}="):
                return line.split("=", 1)[1].strip()
        return str(BIN / default)

    def log_tail(self, lines: int = 20) -> str:
        out = []
        for rel in ("slurm/log/slurmctld.log", "slurm/log/dacctl.log"):
            path = Path(self.workdir) / rel
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"-- {path}\n" + "\n".join(tail))
        return "\n".join(out)


def _dac(release: str, plugin: str):
    suite = slurm_testsuite.testsuite(release)  # fetched first: a fetch failure is its own
    if shutil.which("expect") is None:
        raise AssertionError("expect is not installed (Debian's `expect` package): run `make deps`")
    user = ensure_submit_user()
    workdir = tempfile.mkdtemp(prefix=f"dac-slurmsuite-{release}-{plugin}-")
    os.chmod(workdir, 0o755)
    work = Path(workdir) / "testsuite"
    started = time.monotonic()
    run(
        "dacctl",
        "local",
        "up",
        "--workdir",
        workdir,
        "--servers",
        "2",
        "--bricks-per-server",
        "4",
        "--brick-size",
        "1GiB",
        "--slurm-nodes",
        "2",
        "--slurm-plugin",
        plugin,
        "--slurm-release",
        release,
        timeout=900,
    )
    try:
        lines = run("dacctl", "local", "env", "--workdir", workdir).stdout.splitlines()
        env = dict(line.removeprefix("export ").split("=", 1) for line in lines)
        env = {k: os.path.expandvars(v) for k, v in env.items()}
        env.setdefault("PATH", os.environ["PATH"])
        python_test = slurm_testsuite.PYTHON_TEST[slurm_testsuite.tests_release(release)]
        work.mkdir()
        slurm_testsuite.prepare(suite, release, plugin, work)
        bindir = Path(workdir) / "slurm" / "bin"
        slurm_dir = str(bindir.parent) if (bindir / "sbatch").exists() else "/usr"
        (work / "globals.local").write_text(f'set slurm_dir "{slurm_dir}"\n')
        (work / "testsuite.conf").write_text(
            f"SlurmInstallDir={slurm_dir}\nSlurmConfigDir={Path(env['SLURM_CONF']).parent}\n"
        )
        (work / "python" / "pytest.ini").write_text("[pytest]\n")
        for dirpath, _, _ in os.walk(work):
            os.chown(dirpath, user.pw_uid, user.pw_gid)
        print(
            f"\n{release} {plugin}: local DAC up in {time.monotonic() - started:.0f}s, "
            f"Slurm's tests from {slurm_testsuite.version_of(suite)}"
        )
        yield SuiteDac(release, plugin, workdir, env, work, python_test)
    finally:
        down = run("dacctl", "local", "down", "--workdir", workdir, check=False, timeout=300)
        state = Path(workdir) / "state.json"
        leftover = json.loads(state.read_text()) if down.returncode and state.exists() else None
        shutil.rmtree(workdir, ignore_errors=True)
        print(f"\n{release} {plugin}: {time.monotonic() - started:.0f}s in all")
    assert down.returncode == 0, (down.stdout, down.stderr, leftover)


class Dacs:
    """At most one local DAC at a time: the cases come grouped by release x plugin, and the
    next group's DAC comes up once the last one's is down."""

    def __init__(self):
        self.key, self.current, self.error = None, None, None

    def get(self, release: str, plugin: str) -> SuiteDac:
        if self.key != (release, plugin):
            self.close()
            self.key, self.error = (release, plugin), None
            self.current = _dac(release, plugin)
            try:
                self.dac = next(self.current)
            except Exception as e:  # every case of the group fails with it, not only the first
                self.current, self.error = None, e
        if self.error is not None:
            raise AssertionError(f"no local DAC for {release} {plugin}: {self.error}")
        return self.dac

    def close(self) -> None:
        if self.current is not None:
            current, self.current = self.current, None
            for _ in current:  # runs _dac's finally: down, and its assertion
                pass


@pytest.fixture(scope="session")
def dacs():
    d = Dacs()
    yield d
    d.close()
