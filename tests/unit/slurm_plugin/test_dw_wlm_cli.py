"""dw_wlm_cli.lua, dac's GetSysState under burst_buffer/datawarp (issue 34): job_process, pools
and paths go to the answerer's socket and its reply is printed and returned as dacctl's would
be; every other function, and those three when the socket is absent, the answerer refuses or
is too slow, run dacctl with the very same arguments. A stand-in answerer (a thread) records
each request; a stand-in dacctl records its argv."""

import os
import subprocess
import time
from pathlib import Path

import pytest
from lua_answerer import FakeAnswerer

from daccore.share import SLURM_FILES, asset

CLI = asset("slurm", "dw_wlm_cli.lua")

FAKE_DACCTL = """#!/bin/sh
for a; do printf '%%s\\n' "$a"; done > %(dir)s/argv
echo "dacctl stdout"
echo "dacctl stderr" >&2
exit 3
"""


@pytest.fixture(autouse=True)
def lua_socket():
    r = subprocess.run(["lua5.1", "-e", 'require("socket.unix")'], capture_output=True)
    if r.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("lua-socket is not installed for Lua 5.1 (make deps installs it)")
        pytest.skip("lua-socket is not installed for Lua 5.1 (make deps installs it)")


@pytest.fixture
def site(tmp_path):
    dacctl = tmp_path / "dacctl"
    dacctl.write_text(FAKE_DACCTL % {"dir": tmp_path})
    dacctl.chmod(0o755)
    env = {
        "PATH": os.environ["PATH"],
        "DACCTL": str(dacctl),
        "DAC_ANSWERER_SOCKET": str(tmp_path / "socket"),
        # not the site's 0.5 s: on a loaded test machine a late answer would be a fork here
        "DAC_ANSWERER_TIMEOUT": "1.5",
        "DAC_SLURM_LOG": str(tmp_path / "log"),
    }
    return tmp_path, env


def run(env: dict, *argv: str) -> subprocess.CompletedProcess:
    # run as slurmctld runs GetSysState: the file itself, through its #! line
    return subprocess.run([str(CLI), *argv], env=env, capture_output=True, timeout=30)


def forked_argv(tmp_path: Path) -> list[str] | None:
    f = tmp_path / "argv"
    return f.read_text().splitlines() if f.exists() else None


def test_it_ships_executable_with_the_slurm_files():
    assert "dw_wlm_cli.lua" in SLURM_FILES
    assert CLI.read_text().startswith("#!/usr/bin/lua5.1\n")
    assert os.access(CLI, os.X_OK)


@pytest.mark.parametrize(
    "argv,line",
    [
        (["--function", "pools"], "dac-answer/1 pools\n"),
        (
            ["--function", "job_process", "--job", "/s/job.1/script"],
            "dac-answer/1 job_process --job /s/job.1/script\n",
        ),
        (
            ["--function", "paths", "--job", "/a b/x'y", "--token", "7", "--pathfile", "/p%q"],
            "dac-answer/1 paths --job /a%20b/x%27y --token 7 --pathfile /p%25q\n",
        ),
    ],
)
def test_hot_functions_are_answered_by_the_answerer_byte_for_byte(site, argv, line):
    tmp_path, env = site
    body = b'{"pools": []}\n\xc3\xa9'
    with FakeAnswerer(
        tmp_path / "socket", b"ANSWER 0 %d\n" % len(body) + body + b"an error\n"
    ) as a:
        r = run(env, *argv)
    assert (r.returncode, r.stdout, r.stderr) == (0, body, b"an error\n")
    assert a.lines == [line]
    assert forked_argv(tmp_path) is None
    assert not (tmp_path / "log").exists()


def test_a_refusal_by_dacctl_keeps_its_exit_status(site):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "socket", b"ANSWER 2 9\nrefused.\ndacctl: x\n"):
        r = run(env, "--function", "job_process", "--job", "/s")
    assert (r.returncode, r.stdout, r.stderr) == (2, b"refused.\n", b"dacctl: x\n")
    assert forked_argv(tmp_path) is None


ODD = ["--function", "paths", "--job", "/x y/'z'", "--token", "7", "--pathfile", "$(id)`id`"]


def _fell_back(tmp_path: Path, r: subprocess.CompletedProcess, argv: list[str]) -> None:
    assert forked_argv(tmp_path) == argv  # the same argv, word for word
    assert (r.returncode, r.stdout, r.stderr) == (3, b"dacctl stdout\n", b"dacctl stderr\n")


def test_no_socket_runs_dacctl_with_the_same_argv_and_says_nothing(site):
    tmp_path, env = site
    r = run(env, *ODD)
    _fell_back(tmp_path, r, ODD)
    assert not (tmp_path / "log").exists()  # no answerer installed: nothing to report


def test_a_refusal_runs_dacctl_and_is_logged(site):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "socket", b"REFUSE the mirror is not confirmed current\n") as a:
        r = run(env, *ODD)
    _fell_back(tmp_path, r, ODD)
    assert len(a.lines) == 1
    assert "the mirror is not confirmed current" in (tmp_path / "log").read_text()


def test_a_slow_answerer_is_left_after_the_timeout_for_dacctl(site):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "socket", b"ANSWER 0 2\nno", delay=3.0):
        t = time.monotonic()
        r = run(env, "--function", "pools")
        took = time.monotonic() - t
    _fell_back(tmp_path, r, ["--function", "pools"])
    assert took < 2.5  # 0.3 s for the answerer, then the fork (slow under load)
    assert "timeout" in (tmp_path / "log").read_text()


def test_a_reply_cut_short_runs_dacctl(site):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "socket", b"ANSWER 0 100\nshort"):
        r = run(env, "--function", "pools")
    _fell_back(tmp_path, r, ["--function", "pools"])


@pytest.mark.parametrize(
    "argv",
    [
        ["--function", "setup", "--token", "7", "--caller", "SLURM", "--job", "/a b"],
        ["--function", "teardown", "--token", "7", "--job", "/s", "--hurry"],
        ["--function", "data_in", "--token", "7", "--job", "/s"],
        ["--function", "show_sessions"],
        ["--function", "pools_x"],
        ["pools"],
        [],
    ],
)
def test_every_other_call_runs_dacctl_and_never_asks(site, argv):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "socket", b"ANSWER 0 0\n") as a:
        r = run(env, *argv)
    _fell_back(tmp_path, r, argv)
    assert a.lines == []


def test_socket_none_never_asks(site):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "sock2", b"ANSWER 0 0\n"):
        r = run({**env, "DAC_ANSWERER_SOCKET": "none"}, "--function", "pools")
    _fell_back(tmp_path, r, ["--function", "pools"])


def test_without_lua_socket_it_runs_dacctl(site):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "socket", b"ANSWER 0 0\n") as a:
        # a Lua that finds no C modules: as on a controller without lua-socket
        r = run({**env, "LUA_CPATH": str(tmp_path / "none/?.so")}, "--function", "pools")
    _fell_back(tmp_path, r, ["--function", "pools"])
    assert a.lines == []
    assert "no lua-socket" in (tmp_path / "log").read_text()


def test_a_dacctl_killed_by_a_signal_is_reported_as_a_shell_does(site):
    tmp_path, env = site
    (tmp_path / "dacctl").write_text("#!/bin/sh\nkill -TERM $$\n")
    r = run(env, "--function", "setup")
    assert r.returncode == 128 + 15
