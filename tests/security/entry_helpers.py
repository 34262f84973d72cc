"""A local DAC with a real Slurm, and the two unprivileged users the entry-point attacks run as
(test_entry_*.py). Kept out of conftest.py so other security tests' fixtures never collide."""

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from clitools import BIN, run, setup

#: the two unprivileged users (no passwd entry needed: Slurm and dac go by uid)
ALICE = (1234, 4321)
MALLORY = (5678, 8765)

#: dacctl as another user: the venv's python lives under /root, which users cannot enter, so
#: the system's python3 (same minor version) with the venv's site-packages, as
#: tests/system/test_admin_cli.py does
SYSTEM_PYTHON = "/usr/bin/python3"
_BOOT = (
    "import site, sys; site.addsitedir(sys.argv.pop(1)); from dacctl.main import main; "
    "sys.exit(main(sys.argv[1:]))"
)


def dacctl_as(user, *args, env=None, timeout=60):
    """`dacctl *args` run as `user` (uid, gid), no supplementary groups, from /."""
    version = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert version == str(tuple(sys.version_info[:2])), version
    uid, gid = user
    return subprocess.run(
        [SYSTEM_PYTHON, "-c", _BOOT, sysconfig.get_paths()["purelib"], *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        user=uid,
        group=gid,
        extra_groups=[],
        cwd="/",
        env={"PATH": f"{BIN}:/usr/bin:/bin", **(env or {})},
    )


#: what a failed stage-in of MALLORY's buffer says: a path only its owner may learn
SECRET = "dac-entry-secret-5678"


class Cluster:
    """`dacctl local up --slurm-nodes 1 --slurm-plugin <plugin>`, torn down by `close()`."""

    def __init__(self, plugin: str):
        self.plugin = plugin
        self.workdir = Path(tempfile.mkdtemp(prefix=f"dac-entry-{plugin}-"))
        self.workdir.chmod(0o755)
        run(
            "dacctl",
            "local",
            "up",
            "--workdir",
            str(self.workdir),
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
        lines = run("dacctl", "local", "env", "--workdir", str(self.workdir)).stdout
        self.env = dict(line.removeprefix("export ").split("=", 1) for line in lines.splitlines())

    def close(self) -> None:
        run("dacctl", "local", "down", "--workdir", str(self.workdir), check=False)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def as_user(self, user, *argv, timeout=30):
        """argv run as `user` (uid, gid), no supplementary groups, with the cluster's env."""
        uid, gid = user
        return subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            user=uid,
            group=gid,
            extra_groups=[],
            cwd="/",
            env={"PATH": f"{BIN}:/usr/bin:/bin", **self.env},
        )

    def dacctl(self, user, *args):
        """`dacctl *args` run as `user`, with the cluster's env."""
        return dacctl_as(user, *args, env=self.env, timeout=30)

    def bbstat(self, user, *words):
        return self.as_user(user, "scontrol", "show", "bbstat", *words)

    def drained(self) -> list[str]:
        hosts = json.loads(run("dacctl", "hosts", "--json", env=self.env).stdout)["hosts"]
        return [h["name"] for h in hosts if h["state"] == "drained"]

    def buffer_exists(self, name: str) -> bool:
        out = run("dacctl", "--function", "show_instances", env=self.env).stdout
        return name in [str(i["id"]) for i in json.loads(out)["instances"]]

    def failed_buffer(self, tmp: Path, job: int) -> str:
        """MALLORY's buffer `job`, whose stage-in failed on a path of MALLORY's: root's own
        `dacctl status --line` of it (the line with the secret in it)."""
        tmp.chmod(0o700)
        script = setup(
            self.env,
            tmp,
            job,
            "512MiB",
            f"#DW stage_in type=file source=/tmp/{SECRET}/plans.txt "
            "destination=$DW_JOB_STRIPED/plans.txt",
            uid=MALLORY[0],
            gid=MALLORY[1],
        )
        r = run(
            "dacctl",
            "--function",
            "data_in",
            "--token",
            str(job),
            "--job",
            str(script),
            env=self.env,
            check=False,
            timeout=120,
        )
        assert r.returncode == 1 and SECRET in r.stdout, r.stdout
        line = run("dacctl", "status", "--line", str(job), env=self.env).stdout
        assert SECRET in line, line  # the attack has something to find
        return line


def victim_file(name: str, text: str = "root's own data\n") -> Path:
    """A root-owned file in /root, which no attack may create, change or delete."""
    path = Path("/root") / name
    path.write_text(text)
    path.chmod(0o600)
    return path


def root_sleeper() -> subprocess.Popen:
    """A root process no attack may kill."""
    return subprocess.Popen(["sleep", "600"], start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def forged_workdir(owner, victim: Path, pid: int) -> Path:
    """A directory `owner` made, with a state.json naming a root process and a root file as if
    `dacctl local up` had started and made them (workdir "" matches any command line)."""
    d = Path(tempfile.mkdtemp(prefix="dac-entry-forged-"))
    state = {
        "workdir": "",
        "etcd": {},
        "slurm": {},
        "bricks": [{"host": "h", "file": str(victim), "device": "/dev/loop-none"}],
        "dacd": [{"host": "h", "pid": pid, "metrics": ""}],
    }
    (d / "state.json").write_text(json.dumps(state))
    for p in (d, d / "state.json"):
        os.chown(p, *owner)
    d.chmod(0o755)
    return d
