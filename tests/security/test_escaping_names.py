"""A file name may hold any byte but `/` and NUL: when a stage error names it, the status
record is still written, and neither the job's line (what Slurm shows) nor any dacctl output
carries a raw control character to a terminal. Real dacd, real copier as uid 1234, dacctl as
root and as that user; a second user (5678) sees nothing of the first's buffer."""

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from clitools import run, setup, slurm

from daccore.settings.config import load_config
from daccore.store import Store

UID, GID = 1234, 4321
OTHER_UID, OTHER_GID = 5678, 8765
SYSTEM_PYTHON = "/usr/bin/python3"
_BOOT = (
    "import site, sys; site.addsitedir(sys.argv.pop(1)); from dacctl.main import main; "
    "sys.exit(main(sys.argv[1:]))"
)
#: bytes a terminal must never receive from dac: ESC, BEL, CR, NUL, C1 CSI (UTF-8 and 8-bit)
RAW = (b"\x1b", b"\x07", b"\r", b"\x00", b"\xc2\x9b", b"\x9b", b"\xff")


@pytest.fixture
def escaping_dac():
    """A local DAC (2 servers x 2 bricks of 512 MiB) in a directory other users can enter."""
    assert os.geteuid() == 0, "needs root (loop devices, mounts, other uids)"
    base = Path(tempfile.mkdtemp(prefix="dac-escaping-"))
    base.chmod(0o755)
    workdir = base / "dac"
    run(
        "dacctl",
        "local",
        "up",
        "--workdir",
        str(workdir),
        "--servers",
        "2",
        "--bricks-per-server",
        "2",
        "--brick-size",
        "512MiB",
        timeout=120,
    )
    env = {"DAC_CONFIG": str(workdir / "dac.yaml"), "DAC_ETCD_ENDPOINTS": ""}
    try:
        yield base, env, Store.from_settings(load_config(env["DAC_CONFIG"], env={}).etcd)
    finally:
        run("dacctl", "local", "down", "--workdir", str(workdir), check=False)
        shutil.rmtree(base, ignore_errors=True)


def dacctl_as(env, *args, uid=UID, gid=GID) -> subprocess.CompletedProcess:
    """`dacctl *args` as uid:gid, its output as bytes (the system python3 with the venv's
    site-packages: the venv's interpreter sits where other users cannot go)."""
    if uid == 0:
        return subprocess.run(
            [str(Path(sys.executable).parent / "dacctl"), *args],
            env={**os.environ, **env},
            capture_output=True,
            timeout=120,
        )
    return subprocess.run(
        [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={gid}",
            "--clear-groups",
            SYSTEM_PYTHON,
            "-c",
            _BOOT,
            sysconfig.get_paths()["purelib"],
            *args,
        ],
        env={**os.environ, **env},
        capture_output=True,
        timeout=120,
    )


def assert_clean(out: bytes, what: str) -> str:
    """`out` holds no byte a terminal acts on and is UTF-8; returns it as text."""
    for raw in RAW:
        assert raw not in out, f"{what}: raw {raw!r} in {out!r}"
    return out.decode("utf-8")  # strict: a byte that is not UTF-8 fails here


def unreadable_entry(src: Path, name: bytes) -> None:
    """A file the job's user may list in `src` but not read, so the copier names it."""
    path = os.path.join(os.fsencode(src), name)
    with open(path, "wb") as f:
        f.write(b"root only")
    os.chmod(path, 0o600)


def stage_in_job(base, env, tmp_path, job, name: bytes):
    src = base / f"in{job}"
    src.mkdir()
    os.chown(src, UID, GID)
    (src / "ok.txt").write_bytes(b"fine\n")
    os.chown(src / "ok.txt", UID, GID)
    unreadable_entry(src, name)
    script = setup(
        env,
        tmp_path,
        job,
        "512MiB",
        f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in",
    )
    return src, script


def check_every_output(env, job, shown: str):
    """dacctl status (rich table), --line (scontrol show bbstat), --json, show and buffers,
    as root and as the owner: each carries the escaped name and no raw control byte; the
    other user learns nothing."""
    for uid, gid in ((0, 0), (UID, GID)):
        for args in (("status", job), ("status", job, "--line"), ("show", job), ("buffers",)):
            r = dacctl_as(env, *args, uid=uid, gid=gid)
            text = assert_clean(r.stdout + r.stderr, f"uid {uid} dacctl {' '.join(args)}")
            assert r.returncode == 0, text
            if args[0] != "buffers":  # rich wraps the table's lines at 80 columns in a pipe
                assert shown in text.replace("\n", ""), (args, text)
        r = dacctl_as(env, "status", job, "--json", uid=uid, gid=gid)
        assert_clean(r.stdout, "status --json")
    other = dacctl_as(env, "status", job, uid=OTHER_UID, gid=OTHER_GID)
    assert (
        other.returncode == 1
        and assert_clean(other.stderr, "other user")
        == f"dacctl: user error: no buffer '{job}' of yours (a job id or a persistent buffer's "
        "name)\n"
    )


def test_a_non_utf8_name_in_a_stage_error_is_recorded_and_shown_escaped(escaping_dac, tmp_path):
    base, env, store = escaping_dac
    name = b"bad\xff\xfe\x1b]0;pwned\x07\r\x9b"
    src, script = stage_in_job(base, env, tmp_path, 61, name)
    # today the status write fails (PydanticSerializationError) and data_in waits for its
    # whole stage_timeout: run() gives it 60 s
    r = slurm(env, "data_in", 61, "--job", str(script), check=False)
    shown = f"{src}/bad\\xff\\xfe\\x1b]0;pwned\\x07\\r\\x9b"
    assert (r.returncode, r.stdout) == (
        1,
        f"buffer 61: stage_in failed: {shown}: Permission denied\n",
    )
    (status,) = store.statuses("61").values()
    assert status.error.category.value == "user"
    assert status.error.message == f"stage_in failed: {shown}: Permission denied"
    check_every_output(env, "61", shown)
    slurm(env, "teardown", 61, "--job", str(script))
    assert store.buffer("61") is None or store.buffer("61").record.desired_state.value == "deleted"


def test_an_escape_sequence_in_a_name_never_reaches_a_terminal_raw(escaping_dac, tmp_path):
    base, env, store = escaping_dac
    # valid UTF-8: an OSC title change, a bell, a carriage return, a C1 CSI and a bidi override
    name = "x\x1b]0;pwned\x07\r\u009b2J\u202etxt.exe".encode()
    src, script = stage_in_job(base, env, tmp_path, 62, name)
    r = slurm(env, "data_in", 62, "--job", str(script), check=False)
    shown = f"{src}/x\\x1b]0;pwned\\x07\\r\\u009b2J\\u202etxt.exe"
    assert r.returncode == 1
    assert (
        assert_clean(r.stdout.encode(), "data_in")
        == f"buffer 62: stage_in failed: {shown}: Permission denied\n"
    )
    (status,) = store.statuses("62").values()
    assert "\x1b" not in status.error.message and shown in status.error.message
    check_every_output(env, "62", shown)
    slurm(env, "teardown", 62, "--job", str(script))
