"""The storage side and the logs, attacked by a second user (issue 30): a local DAC with a real
Slurm 22.05 (burst_buffer/lua); the submit user's job writes a secret into its 0700 buffer and
keeps it live, a second job of theirs fails its stage-in on a path in their 0700 directory, and
MALLORY, another unprivileged uid, then reads everything of the workdir it can open (brick
files, loop devices, fs_root, node roots, every log) and every job Slurm shows it. Nothing may
carry the secret or the path. Then the admin check: a brick device and an fs_root opened to
users make `dacctl hosts` warn."""

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from clitools import run, wait_for
from security.entry_helpers import MALLORY

from dacd.staging.reach import PROOF_PREFIX, proves
from daclocal.cluster import LocalState
from daclocal.procs import child_env, spawn, stop_pid
from daclocal.slurm import SUBMIT_USER, ensure_submit_user

#: what MALLORY runs: every regular file and block device under the roots it can open, and
#: every directory it can list; the files that hold one of the secrets (argv: roots, secrets)
_SCAN = r"""
import json, os, stat, sys
roots, secrets = json.loads(sys.argv[1]), [s.encode() for s in json.loads(sys.argv[2])]
found, listed = [], []
def look(path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISBLK(st.st_mode)):
            return
        with os.fdopen(os.dup(fd), "rb") as f:
            tail = b""
            while chunk := f.read(1 << 20):
                if any(s in tail + chunk for s in secrets):
                    found.append(path)
                    return
                tail = chunk[-256:]
    finally:
        os.close(fd)
for root in roots:
    if not os.path.isdir(root):
        look(root)
        continue
    for d, dirs, files in os.walk(root, onerror=lambda e: None):
        listed.append(d)
        for name in files:
            look(os.path.join(d, name))
print(json.dumps({"found": found, "listed": listed}))
"""


def as_mallory(*argv, env=None):
    uid, gid = MALLORY
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=120,
        user=uid,
        group=gid,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )


@pytest.fixture(scope="module")
def storage():
    """(workdir, env, jobs dir) of a local DAC with Slurm; always torn down."""
    workdir = Path(tempfile.mkdtemp(prefix="dac-storage-"))
    workdir.chmod(0o755)
    user = ensure_submit_user()
    jobs = workdir / "jobs"  # the submit user's own, 0700: a private home directory
    try:
        run(
            "dacctl",
            "local",
            "up",
            "--workdir",
            str(workdir),
            "--servers",
            "1",
            "--bricks-per-server",
            "2",
            "--brick-size",
            "512MiB",
            "--slurm-nodes",
            "1",
            timeout=120,
        )
        lines = run("dacctl", "local", "env", "--workdir", str(workdir)).stdout.splitlines()
        env = dict(line.removeprefix("export ").split("=", 1) for line in lines)
        jobs.mkdir(mode=0o700)
        os.chown(jobs, user.pw_uid, user.pw_gid)
        yield workdir, env, jobs
    finally:
        run("dacctl", "local", "down", "--workdir", str(workdir), check=False)
        shutil.rmtree(workdir, ignore_errors=True)


def sbatch(env, jobs: Path, body: str) -> str:
    user = pwd.getpwnam(SUBMIT_USER)
    path = jobs / f"job{time.monotonic_ns()}.sh"
    path.write_text(body)
    os.chown(path, user.pw_uid, user.pw_gid)
    path.chmod(0o600)
    r = subprocess.run(
        ["runuser", "-u", SUBMIT_USER, "--", "sbatch", "--parsable", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=jobs,
        env={**os.environ, **env},
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split(";")[0]


def scontrol(env, *args) -> str:
    return subprocess.run(
        ["scontrol", *args], capture_output=True, text=True, timeout=30, env={**os.environ, **env}
    ).stdout


def test_another_user_reads_nothing_of_a_live_buffer_or_of_the_logs(storage):
    workdir, env, jobs = storage
    state = LocalState.load(workdir)
    assert state is not None, workdir
    # built by the job's shell: the script itself never holds it
    live = sbatch(
        env,
        jobs,
        "#!/bin/bash\n#DW jobdw capacity=512MiB access_mode=striped "
        "type=scratch pool=default\np=storage\n"
        'for i in $(seq 2000); do echo "${p}-side-secret-$SLURM_JOB_ID"; '
        "done > $DW_JOB_STRIPED/data\nsync\nsleep 600\n",
    )
    pattern = f"storage-side-secret-{live}"
    fs = workdir / "fs" / "dac-server-1" / live / "mnt"
    wait_for(
        lambda: (
            (fs / "striped" / "data").exists() and pattern in (fs / "striped" / "data").read_text()
        ),
        90,
        "the job's data",
    )
    subprocess.run(["sync"], check=True)
    devices = [b["device"] for b in state.bricks]
    files = [b["file"] for b in state.bricks]
    # the attack has something to find: the pattern is on a brick, read as root
    assert any(pattern.encode() in Path(f).read_bytes() for f in files)
    secret_dir = "dac-storage-private-5e1b"
    failed = sbatch(
        env,
        jobs,
        "#!/bin/bash\n#DW jobdw capacity=64MiB access_mode=striped "
        "type=scratch pool=default\n#DW stage_in type=file "
        f"source={jobs}/{secret_dir}/plan.txt "
        "destination=$DW_JOB_STRIPED/plan.txt\necho never\n",
    )
    try:
        wait_for(
            lambda: "Priority=0 " in scontrol(env, "show", "job", failed), 90, f"job {failed} held"
        )
        logs = [p for p in workdir.rglob("*.log") if secret_dir in p.read_text(errors="replace")]
        assert logs, "no log names the failed path: the attack has nothing to find"
        scan = as_mallory(
            "/usr/bin/python3",
            "-c",
            _SCAN,
            json.dumps([str(workdir), *devices]),
            json.dumps([pattern, secret_dir]),
        )
        assert scan.returncode == 0, scan.stderr
        result = json.loads(scan.stdout)
        assert result["found"] == [], result["found"]
        listed = set(result["listed"])
        for closed in (
            "bricks",
            "logs",
            "fs",
            "fs/dac-server-1",
            f"fs/dac-server-1/{live}",
            "nodes/node1",
            f"nodes/node1/{live}",
            "slurm/log",
        ):
            assert str(workdir / closed) not in listed, closed
        # what Slurm shows MALLORY of the submit user's jobs holds neither
        for argv in (
            ["scontrol", "show", "job"],
            ["squeue", "-a", "-o", "%i %u %r %j"],
            ["scontrol", "show", "burst"],
        ):
            out = as_mallory(*argv, env=env)
            text = out.stdout + out.stderr
            assert secret_dir not in text and pattern not in text, (argv, text)
        # and its owner still reaches the buffer at its path, and reads the failed one's line
        mine = subprocess.run(
            ["runuser", "-u", SUBMIT_USER, "--", "scontrol", "show", "job", failed],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
        ).stdout
        assert secret_dir in mine, mine
        # a split stage's proof (issue 35) is made by root at the buffer's top: neither its
        # owner nor another user can make one there, so no server is ever fooled into
        # copying a share where the buffer's filesystem is not
        proof = fs / (PROOF_PREFIX + "0" * 32)
        make = ["/usr/bin/python3", "-c", "import sys; open(sys.argv[1], 'x')", str(proof)]
        for tried in (
            subprocess.run(
                ["runuser", "-u", SUBMIT_USER, "--", *make], capture_output=True, text=True
            ),
            as_mallory(*make),
        ):
            assert tried.returncode != 0 and "Permission denied" in tried.stderr, tried
        assert not proof.exists() and not proves(str(fs), "0" * 32)
    finally:
        for job in (live, failed):
            subprocess.run(
                ["scancel", "--hurry", job], env={**os.environ, **env}, capture_output=True
            )
    # every log the local DAC writes (not the job's own output): root's alone
    # os.walk, not rglob: the cancelled jobs' buffers are torn down meanwhile, and rglob fails
    # on a buffer directory removed under it (CI); os.walk passes over one
    written = [
        Path(top, name)
        for top, _, names in os.walk(workdir)
        for name in names
        if name.endswith((".log", ".out")) and jobs not in Path(top, name).parents
    ]
    assert len(written) >= 7, written  # dacd, user service, etcd, munged, slurmctld, slurmd…
    for log in written:
        st = log.stat()
        assert st.st_mode & 0o077 == 0, f"{log}: mode {st.st_mode & 0o777:04o}"


def restart_dacd(workdir: Path, host: str) -> None:
    state = LocalState.load(workdir)
    assert state is not None, workdir
    d = next(d for d in state.dacd if d["host"] == host)
    stop_pid(d["pid"], "dacd.main")
    proc = spawn(
        [
            sys.executable,
            "-m",
            "dacd.main",
            "--config",
            str(state.config_path),
            "--host",
            host,
            "--metrics-address",
            d["metrics"],
        ],
        workdir / "logs" / f"dacd-{host}.log",
        child_env(DAC_CONFIG=str(state.config_path)),
    )
    d["pid"] = proc.pid
    state.save()


def hosts(env) -> tuple[list[str], str]:
    """The warnings in `dacctl hosts --json`, and `dacctl hosts` read after it, once the host
    is up again (a restarted dacd registers anew)."""

    def up():
        rows = json.loads(run("dacctl", "hosts", "--json", env=env).stdout)["hosts"]
        return rows if all(r["state"] == "up" for r in rows) else None

    rows = wait_for(up, 30, "the host up")
    return [w for r in rows for w in r["warnings"]], run("dacctl", "hosts", env=env).stdout


def test_dacctl_hosts_warns_of_a_brick_or_fs_root_open_to_users(storage):
    workdir, env, _ = storage
    state = LocalState.load(workdir)
    assert state is not None, workdir
    device, fs_root = state.bricks[0]["device"], workdir / "fs" / "dac-server-1"
    assert hosts(env)[0] == []  # as up lays it out: nothing open
    try:
        os.chmod(device, 0o644)
        fs_root.chmod(0o755)
        restart_dacd(workdir, "dac-server-1")
        warnings, table = wait_for(
            lambda: (lambda h: h if len(h[0]) == 2 else None)(hosts(env)), 30, "the host's warnings"
        )
        assert warnings == [
            f"brick brick0: device {device} is open to every user (mode 0644): make it 0600 "
            "or 0660 to a group no user is in",
            f"fs_root {fs_root} can be listed or changed by every user (mode 0755): chmod 0711 it",
        ], warnings
        assert f"warning: dac-server-1: {warnings[1]} (admin)" in table.splitlines()
    finally:
        os.chmod(device, 0o600)
        fs_root.chmod(0o711)
    restart_dacd(workdir, "dac-server-1")
    wait_for(lambda: hosts(env)[0] == [], 30, "the warnings gone")
