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


@pytest.fixture
def site(tmp_path, lua_socket):
    """(tmp_path, the forwarder's environment), under each Lua (`lua`, conftest.py: the test
    takes it too), in which lua-socket must load."""
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


def run(lua: str, env: dict, *argv: str) -> subprocess.CompletedProcess:
    # as slurmctld runs GetSysState: the file itself, through its #! line, where that names
    # `lua`; under any other, `lua` runs the file, as a first line edited for it would
    command = [str(CLI)] if CLI.read_text().startswith(f"#!{lua}\n") else [lua, str(CLI)]
    return subprocess.run([*command, *argv], env=env, capture_output=True, timeout=30)


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
def test_hot_functions_are_answered_by_the_answerer_byte_for_byte(lua, site, argv, line):
    tmp_path, env = site
    body = b'{"pools": []}\n\xc3\xa9'
    with FakeAnswerer(
        tmp_path / "socket", b"ANSWER 0 %d\n" % len(body) + body + b"an error\n"
    ) as a:
        r = run(lua, env, *argv)
    assert (r.returncode, r.stdout, r.stderr) == (0, body, b"an error\n")
    assert a.lines == [line]
    assert forked_argv(tmp_path) is None
    assert not (tmp_path / "log").exists()


def test_a_refusal_by_dacctl_keeps_its_exit_status(lua, site):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "socket", b"ANSWER 2 9\nrefused.\ndacctl: x\n"):
        r = run(lua, env, "--function", "job_process", "--job", "/s")
    assert (r.returncode, r.stdout, r.stderr) == (2, b"refused.\n", b"dacctl: x\n")
    assert forked_argv(tmp_path) is None


ODD = ["--function", "paths", "--job", "/x y/'z'", "--token", "7", "--pathfile", "$(id)`id`"]


def _fell_back(tmp_path: Path, r: subprocess.CompletedProcess, argv: list[str]) -> None:
    assert forked_argv(tmp_path) == argv  # the same argv, word for word
    assert (r.returncode, r.stdout, r.stderr) == (3, b"dacctl stdout\n", b"dacctl stderr\n")


def test_no_socket_runs_dacctl_with_the_same_argv_and_says_nothing(lua, site):
    tmp_path, env = site
    r = run(lua, env, *ODD)
    _fell_back(tmp_path, r, ODD)
    assert not (tmp_path / "log").exists()  # no answerer installed: nothing to report


def test_a_refusal_runs_dacctl_and_is_logged(lua, site):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "socket", b"REFUSE the mirror is not confirmed current\n") as a:
        r = run(lua, env, *ODD)
    _fell_back(tmp_path, r, ODD)
    assert len(a.lines) == 1
    assert "the mirror is not confirmed current" in (tmp_path / "log").read_text()


def test_a_slow_answerer_is_left_after_the_timeout_for_dacctl(lua, site):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "socket", b"ANSWER 0 2\nno", delay=3.0):
        t = time.monotonic()
        r = run(lua, env, "--function", "pools")
        took = time.monotonic() - t
    _fell_back(tmp_path, r, ["--function", "pools"])
    assert took < 2.5  # 0.3 s for the answerer, then the fork (slow under load)
    assert "timeout" in (tmp_path / "log").read_text()


def test_a_reply_cut_short_runs_dacctl(lua, site):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "socket", b"ANSWER 0 100\nshort"):
        r = run(lua, env, "--function", "pools")
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
def test_every_other_call_runs_dacctl_and_never_asks(lua, site, argv):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "socket", b"ANSWER 0 0\n") as a:
        r = run(lua, env, *argv)
    _fell_back(tmp_path, r, argv)
    assert a.lines == []


def test_socket_none_never_asks(lua, site):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "sock2", b"ANSWER 0 0\n"):
        r = run(lua, {**env, "DAC_ANSWERER_SOCKET": "none"}, "--function", "pools")
    _fell_back(tmp_path, r, ["--function", "pools"])


def test_without_lua_socket_it_runs_dacctl(lua, site):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "socket", b"ANSWER 0 0\n") as a:
        # a Lua that finds no C modules: as on a controller without lua-socket
        r = run(lua, {**env, "LUA_CPATH": str(tmp_path / "none/?.so")}, "--function", "pools")
    _fell_back(tmp_path, r, ["--function", "pools"])
    assert a.lines == []
    assert "no lua-socket" in (tmp_path / "log").read_text()


def test_a_dacctl_killed_by_a_signal_is_reported_as_a_shell_does(lua, site):
    tmp_path, env = site
    (tmp_path / "dacctl").write_text("#!/bin/sh\nkill -TERM $$\n")
    r = run(lua, env, "--function", "setup")
    assert r.returncode == 128 + 15


@pytest.mark.parametrize("code", [0, 1, 3, 127, 255])
def test_dacctls_exit_status_is_the_forwarders(lua, site, code):
    """os.execute answers Lua 5.1's way (a wait status) or 5.2+'s (true|nil, "exit", code):
    the forwarder exits with dacctl's status under each."""
    tmp_path, env = site
    (tmp_path / "dacctl").write_text(f"#!/bin/sh\necho out\nexit {code}\n")
    r = run(lua, env, "--function", "setup")
    assert (r.returncode, r.stdout) == (code, b"out\n")


def test_a_shell_that_cannot_start_is_exit_127(lua, no_new_process):
    """No process can start (RLIMIT_NPROC): glibc's system() gives Lua 5.1 to 5.3 its 127,
    and 5.4 an error instead; the forwarder exits 127 under each, as a shell would."""
    limit, where = no_new_process
    script = where / CLI.name
    script.write_bytes(CLI.read_bytes())
    env = {"PATH": os.environ["PATH"], "DACCTL": "/bin/true", "DAC_ANSWERER_SOCKET": "none"}
    r = subprocess.run(
        [lua, str(script), "--function", "setup"],
        env=env,
        capture_output=True,
        timeout=30,
        preexec_fn=limit,
    )
    assert (r.returncode, r.stdout, r.stderr) == (127, b"", b"")
