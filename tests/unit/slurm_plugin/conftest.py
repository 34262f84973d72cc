"""The Lua every test here runs slurm-plugin's scripts under: a test that takes `lua` runs once
for each of lua5.1 to lua5.4 (lua_answerer.LUAS), and `lua_socket` adds that lua-socket loads
in it. A missing interpreter, liblua or lua-socket is a skip on a developer's machine and a
failure under CI=true, where scripts/install-system-deps has installed them all."""

import functools
import os
import pwd
import resource
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lua_answerer import LUAS, missing


@functools.cache
def _loads_socket_unix(lua: str) -> bool:
    r = subprocess.run([lua, "-e", 'require("socket.unix")'], capture_output=True, timeout=30)
    return r.returncode == 0


@pytest.fixture(params=LUAS)
def lua(request) -> str:
    """The path of one Lua interpreter, e.g. /usr/bin/lua5.4."""
    path = shutil.which(request.param)
    if path is None:
        missing(f"{request.param} is not installed")
    return path


@pytest.fixture
def lua_socket(lua) -> str:
    """`lua`, in which lua-socket's socket.unix loads."""
    if not _loads_socket_unix(lua):
        missing(f"lua-socket is not installed for {os.path.basename(lua)}")
    return lua


@pytest.fixture
def no_new_process() -> Iterator[tuple[Callable[[], None], Path]]:
    """(a preexec_fn after which the process can start no other, a directory anyone may read
    for what it runs). RLIMIT_NPROC 0 fails every fork; root's is not enforced, so as root the
    process becomes nobody first, and the directory is outside root's 0700 pytest tree."""
    nobody = pwd.getpwnam("nobody")  # here: the child of a fork looks nothing up
    where = Path(tempfile.mkdtemp(prefix="dac-lua-"))
    where.chmod(0o755)

    def limit() -> None:
        if os.geteuid() == 0:
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))

    try:
        yield limit, where
    finally:
        shutil.rmtree(where)
