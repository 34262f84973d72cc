"""The local DAC's launcher for users (`DIR/bin/dacctl`, daclocal/userbin.py): two unprivileged
users run it, and neither can change what the other (or root) runs through it."""

import os
import subprocess
import sys

import pytest
from security.staging_dac import GID, OTHER_GID, OTHER_UID, UID

from daclocal import userbin

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
