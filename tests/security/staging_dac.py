"""A local DAC for the staging attacks (tests/security/test_staging_*.py): real etcd, real
dacd with a short `stage_timeout`, loop-device bricks, jobs of two real unprivileged users."""

import contextlib
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import yaml
from clitools import pools, run, setup, slurm, wait_for

from daccore.settings.config import load_config
from daccore.store import Store
from dacd.staging.run import interpreter
from daclocal.cluster import LocalState
from daclocal.procs import child_env, spawn, stop_pid

UID, GID = 1234, 4321  # the attacker
OTHER_UID, OTHER_GID = 5678, 8765  # a second user whose next job must run
STAGE_TIMEOUT = 20  # dacctl waits this long; dacd kills the copier 2 s before (time_limit)
_DACDS: set[int] = set()  # this test's dacd pids: only their copiers are ours (the machine
#                          is shared with other test runs using the same uids)


@pytest.fixture
def open_dir():
    """A directory every user may enter (as tests/system's): jobs reach their buffers here."""
    path = Path(tempfile.mkdtemp(prefix="dac-sec-staging-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def dac(open_dir):
    """A local DAC of one server for one test (staging_dac.up); always torn down."""
    workdir = open_dir / "dac"
    env, store = up(workdir)
    yield workdir, env, store
    down(workdir)


@pytest.fixture
def one_brick(open_dir):
    """A local DAC of one server with one brick: the next buffer gets the same brick."""
    workdir = open_dir / "dac"
    env, store = up(workdir, servers=1, bricks=1)
    yield open_dir, workdir, env, store
    down(workdir)


def up(workdir: Path, servers: int = 1, bricks: int = 2, stage_timeout: float = STAGE_TIMEOUT):
    """`dacctl local up`, then each dacd restarted with `stage_timeout` in the config."""
    run(
        "dacctl",
        "local",
        "up",
        "--workdir",
        str(workdir),
        "--servers",
        str(servers),
        "--bricks-per-server",
        str(bricks),
        "--brick-size",
        "512MiB",
    )
    state = LocalState.load(workdir)
    assert state is not None, workdir
    config = yaml.safe_load(state.config_path.read_text())
    config["stage_timeout"] = stage_timeout
    state.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    for d in state.dacd:
        stop_pid(d["pid"], "dacd.main")
        proc = spawn(
            [
                sys.executable,
                "-m",
                "dacd.main",
                "--config",
                str(state.config_path),
                "--host",
                d["host"],
                "--metrics-address",
                d["metrics"],
            ],
            workdir / "logs" / f"dacd-{d['host']}-2.log",
            child_env(DAC_CONFIG=str(state.config_path)),
        )
        d["pid"] = proc.pid
        state.save()
    _DACDS.clear()
    _DACDS.update(d["pid"] for d in state.dacd)
    env = {"DAC_CONFIG": str(state.config_path), "DAC_ETCD_ENDPOINTS": ""}
    store = Store.from_settings(load_config(env["DAC_CONFIG"], env={}).etcd)
    wait_for(lambda: len(store.alive()) == servers, 30, "dacd back")
    return env, store


def down(workdir: Path) -> None:
    run("dacctl", "local", "down", "--workdir", str(workdir), check=False)


def owned(path, uid=UID, gid=GID, mode=0o755):
    os.makedirs(path, exist_ok=True)
    os.chown(path, uid, gid)
    os.chmod(path, mode)
    return Path(path)


def write(path, data=b"x", uid=UID, gid=GID, mode=0o644):
    with open(path, "wb") as f:
        f.write(data)
    os.chown(path, uid, gid)
    os.chmod(path, mode)
    return Path(path)


def as_user(*argv, uid=UID, gid=GID):
    """A command run as the user, as the user could on a storage server or in the job."""
    return subprocess.run(
        list(argv),
        check=True,
        capture_output=True,
        user=uid,
        group=gid,
        extra_groups=[gid],
        cwd="/",
    )


def buffer_fs(workdir: Path, store, job) -> Path:
    """The buffer's filesystem on its primary host: striped/ is $DW_JOB_STRIPED."""
    host = store.buffer(str(job)).record.allocation.primary_host
    return workdir / "fs" / host / str(job) / "mnt"


def snapshot(path: Path) -> list:
    """Every entry under `path` with owner, mode and size: what root's tree looked like."""
    out = []
    for dirpath, dirs, files in os.walk(path):
        for name in sorted(dirs + files) + [""]:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out.append((p, st.st_uid, st.st_gid, st.st_mode, st.st_size))
    return sorted(out)


def copiers(uid=UID) -> list[int]:
    """Pids of the user's copier processes (python3 -I -S /dev/fd/N) that this test's dacd
    started, and their workers."""
    procs = {}
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and os.stat(f"/proc/{pid}").st_uid == uid:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if b"-I" in cmd and b"-S" in cmd and any(c.startswith(b"/dev/fd/") for c in cmd):
                    status = Path(f"/proc/{pid}/status").read_text()
                    procs[int(pid)] = int(status.split("PPid:")[1].split()[0])
        except (OSError, IndexError):
            pass
    mains = {pid for pid, parent in procs.items() if parent in _DACDS}
    return sorted(mains | {pid for pid, parent in procs.items() if parent in mains})


# Run as the user, with dacd's pids as arguments: stops each of their copiers (and its workers)
# the moment it starts and prints the copier's pid. A process of the user's own, not one spawned
# per stop: forking pytest for `kill` took long enough on a loaded machine (2 cores, another
# suite beside) for the whole copy to end first, and `kill` then found no process.
_STOPPER = r"""
import os, signal, sys, time
dacds, me, stopped = {int(p) for p in sys.argv[1:]}, os.getuid(), set()
print("ready", flush=True)
while True:
    for entry in os.scandir("/proc"):
        try:
            if not entry.name.isdigit() or entry.stat().st_uid != me:
                continue
            pid = int(entry.name)
            if pid in stopped:
                continue
            with open(f"/proc/{pid}/stat", "rb") as f:
                parent = int(f.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            if parent in dacds and b"-I" in cmd and any(c.startswith(b"/dev/fd/") for c in cmd):
                os.kill(pid, signal.SIGSTOP)
                stopped.add(pid)
                print(pid, flush=True)
            elif parent in stopped:  # a worker forked before its copier was stopped
                os.kill(pid, signal.SIGSTOP)
                stopped.add(pid)
        except (OSError, ValueError, IndexError):
            pass
    time.sleep(0.001)
"""


@contextlib.contextmanager
def stopping_copiers(uid=UID, gid=GID):
    """The user stops their own copiers (SIGSTOP, as they may: each runs with their uid),
    standing for any stage that never ends: a hung NFS source, a disk that stops answering.
    Every copier this test's dacd starts for `uid` inside the block is stopped as it starts;
    yields `next_stopped(timeout)`, the pid of the next one stopped."""
    proc = subprocess.Popen(
        [interpreter(), "-I", "-S", "-c", _STOPPER, *map(str, _DACDS)],
        stdout=subprocess.PIPE,
        text=True,
        user=uid,
        group=gid,
        extra_groups=[gid],
        cwd="/",
    )
    lines: queue.Queue[str] = queue.Queue()
    out = proc.stdout
    assert out is not None

    def read() -> None:
        for line in out:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def next_stopped(timeout: float = 30) -> int:
        try:
            return int(lines.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError("no copier started") from None

    try:
        assert lines.get(timeout=30) == "ready\n"
        yield next_stopped
    finally:
        proc.kill()
        proc.wait()


def next_job_runs(workdir: Path, env, store, tmp_path, src_dir: Path, job: int) -> None:
    """The other user's next job: set up, staged in, torn down; its data arrives."""
    src = owned(src_dir / f"next{job}", OTHER_UID, OTHER_GID)
    write(src / "f", b"next job\n", OTHER_UID, OTHER_GID)
    script = setup(
        env,
        tmp_path,
        job,
        "512MiB",
        f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in",
        uid=OTHER_UID,
        gid=OTHER_GID,
    )
    slurm(env, "data_in", job, "--job", str(script))
    assert (buffer_fs(workdir, store, job) / "striped" / "in" / "f").read_bytes() == b"next job\n"
    slurm(env, "teardown", job, "--job", str(script), "--hurry")
    assert store.buffer(str(job)) is None


__all__ = [
    "open_dir",
    "one_brick",
    "UID",
    "GID",
    "OTHER_UID",
    "OTHER_GID",
    "up",
    "down",
    "owned",
    "write",
    "as_user",
    "buffer_fs",
    "snapshot",
    "copiers",
    "stopping_copiers",
    "next_job_runs",
    "pools",
    "setup",
    "slurm",
]
