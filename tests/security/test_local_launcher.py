"""The local DAC's launchers: the one for users (`DIR/bin/dacctl`, daclocal/userbin.py), which
two unprivileged users run and neither can change what the other (or root) runs through it; and
the command lines root starts dac's daemons with, which import nothing from the directory root
stands in (issue 45)."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from security.staging_dac import GID, OTHER_GID, OTHER_UID, UID

from daccore.settings.config import _parse_apart
from dacd.warm_ansible import WarmAnsible
from daclocal import userbin
from daclocal.procs import python_module, spawn

USERS = ((UID, GID), (OTHER_UID, OTHER_GID))


def as_user(user, *argv):
    uid, gid = user
    return subprocess.run(
        list(argv),
        user=uid,
        group=gid,
        extra_groups=[],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )


@pytest.fixture
def launcher(open_dir, monkeypatch):
    """A launcher whose imports come from copies in DIR/lib, as for a venv under /root."""
    workdir = open_dir / "w"
    workdir.mkdir()
    reached = userbin.open_to_all
    monkeypatch.setattr(
        userbin, "open_to_all", lambda p, execute=False: execute and reached(p, execute)
    )
    assert userbin.write_launcher(workdir) is None
    return workdir


def test_each_user_runs_it_and_neither_can_change_it(launcher):
    bin_, lib = launcher / "bin", launcher / "lib"
    # imports from copies: nothing of the private venv, its python link included
    text = (bin_ / "dacctl").read_text()
    assert str(lib) in text and sys.prefix not in text
    assert (lib / "dac" / "daccore" / "__init__.py").is_file()
    for user in USERS:
        r = as_user(user, str(bin_ / "dacctl"), "--version")
        assert r.returncode == 0 and r.stdout.startswith("dac, version"), r
        for target in (bin_ / "dacctl", lib / "dac" / "daccore" / "__init__.py"):
            w = as_user(user, "sh", "-c", f"echo x >> {target}")
            assert w.returncode != 0 and "Permission denied" in w.stderr, w
        for d in (bin_, lib, lib / "dac", lib / "dac" / "daccore"):
            w = as_user(user, "touch", str(d / "planted"))
            assert w.returncode != 0 and not (d / "planted").exists(), w
    for p in (bin_ / "dacctl", lib, *lib.rglob("*")):
        st = os.lstat(p)
        assert st.st_uid == 0 and not st.st_mode & 0o022, p  # root's, nobody else writes


# -- the daemons' command lines, run from a directory another user planted dac's modules in -------

#: what each planted module does when imported: say so, with the uid that imported it, in the
#: directory it was planted in (each is one level down)
PLANT = """import os
top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(top, "ran"), "a") as f:
    f.write(f"{os.getuid()} {__name__}\\n")
"""
#: every module of dac's a daemon's command line names, its packages, and PyYAML (the config
#: parser's child imports it)
PLANTED = (
    "dacd/__init__.py",
    "dacd/main.py",
    "dacd/warm_ansible.py",
    "dacctl/__init__.py",
    "dacctl/main.py",
    "dacctl/bbstat.py",
    "daccore/__init__.py",
    "dacservice/__init__.py",
    "dacservice/answerer/__init__.py",
    "dacservice/users/__init__.py",
    "dacservice/users/__main__.py",
    "daclocal/__init__.py",
    "yaml/__init__.py",
)
BIN = Path(sys.executable).parent


@pytest.fixture
def planted():
    """A directory like /tmp (root's, 1777) where uid 5678 put its own dacd, dacctl, daccore,
    dacservice, daclocal and yaml; yields it and the file any of those writes when imported."""
    top = Path(tempfile.mkdtemp(prefix="dac-sec-cwd-", dir="/tmp"))
    top.chmod(0o1777)
    r = as_user(
        (OTHER_UID, OTHER_GID),
        "sh",
        "-c",
        'cd "$1" && code=$2 && shift 2 && for f; do '
        'mkdir -p "${f%/*}" && printf %s "$code" > "$f" || exit 1; done',
        "sh",
        str(top),
        PLANT,
        *PLANTED,
    )
    assert r.returncode == 0, r
    assert (top / "dacd" / "main.py").stat().st_uid == OTHER_UID
    yield top, top / "ran"
    shutil.rmtree(top, ignore_errors=True)


def test_the_planted_modules_are_what_a_plain_python_m_runs(planted):
    """The attack itself, so the tests below can fail: `python -m` there runs the user's."""
    evil, ran = planted
    r = subprocess.run(
        [sys.executable, "-m", "dacd.main", "--help"], cwd=evil, capture_output=True, text=True
    )
    assert ran.read_text().splitlines() == ["0 dacd", "0 __main__"], r


def test_root_starts_no_daemon_with_a_module_of_the_directory_it_stands_in(
    planted, tmp_path, monkeypatch
):
    evil, ran = planted
    monkeypatch.chdir(evil)
    # dacd and the user service as `dacctl local up` starts them (quick exits: --help)
    for argv, says in (
        (python_module("dacd.main", "--help"), "usage: dacd "),
        (python_module("dacservice.users", "--help"), "usage: dac-user-service"),
        # the answerer and the Slurm hooks: the venv's entry points (daclocal/slurm.py)
        ([str(BIN / "dac-answerer"), "--help"], "usage: dac-answerer"),
        ([str(BIN / "dacctl"), "--version"], "dac, version"),
        ([str(BIN / "dac-bbstat"), "--help"], "dac-bbstat: usage:"),
    ):
        r = subprocess.run(argv, cwd=evil, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and says in r.stdout + r.stderr, (argv, r)
    # through spawn, as up does: the daemon starts in /, whatever the caller's directory
    log = tmp_path / "dacd.log"
    assert spawn(python_module("dacd.main", "--help"), log).wait(60) == 0
    assert log.read_text().startswith("usage: dacd ")
    assert spawn(["sh", "-c", "pwd"], tmp_path / "pwd.log").wait(60) == 0
    assert (tmp_path / "pwd.log").read_text() == "/\n"
    # dacd's warm Ansible server, started by dacd standing here
    warm = WarmAnsible(log=subprocess.DEVNULL)
    try:
        warm.ensure()
        deadline = time.monotonic() + 60
        while not os.path.exists(warm.socket):  # the real server listens
            assert warm._proc is not None and warm._proc.poll() is None, "the server exited"
            assert time.monotonic() < deadline, "warm Ansible server never listened"
            time.sleep(0.05)
    finally:
        warm.stop()
    # a big config is parsed by a child interpreter, which imports PyYAML
    config = tmp_path / "dac.yaml"
    config.write_text("pools: {fast: {granularity: 1GiB}}\n")
    assert _parse_apart(str(config)) == {"pools": {"fast": {"granularity": "1GiB"}}}
    assert not ran.exists(), ran.read_text()
