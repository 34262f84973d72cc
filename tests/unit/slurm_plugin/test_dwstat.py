"""dwstat.lua, dac's GetSysStatus under burst_buffer/datawarp (issue 45): `scontrol show bbstat`
and `scontrol show dwstat` words go to the answerer's socket as bbstat with no caller named, its
answer (dac-bbstat's stdout) is printed with exit 0; when the socket is absent, the answerer
refuses, is too slow, or lua-socket is missing, dac-bbstat runs with the very same words, and
nothing else ever runs. A stand-in answerer (a thread) records each request; a stand-in
dac-bbstat records its argv and the caller it was given."""

import os
import subprocess
import time
from pathlib import Path

import pytest
from lua_answerer import FakeAnswerer

from daccore.share import SLURM_EXECUTABLES, SLURM_FILES, asset

CLI = asset("slurm", "dwstat.lua")

FAKE_BBSTAT = """#!/bin/sh
for a; do printf '%%s\\n' "$a"; done > %(dir)s/argv
printf '%%s' "$DAC_BBSTAT_CALLER" > %(dir)s/caller
echo "dac-bbstat stdout"
"""


@pytest.fixture
def site(tmp_path, lua_socket):
    """(tmp_path, the forwarder's environment), under each Lua (`lua`, conftest.py: the test
    takes it too), in which lua-socket must load."""
    bbstat = tmp_path / "dac-bbstat"
    bbstat.write_text(FAKE_BBSTAT % {"dir": tmp_path})
    bbstat.chmod(0o755)
    env = {
        "PATH": os.environ["PATH"],
        "DAC_BBSTAT": str(bbstat),
        "DACCTL": "/nonexistent/dacctl",  # never run, whatever the words
        "DAC_ANSWERER_SOCKET": str(tmp_path / "socket"),
        # not the site's 0.5 s: on a loaded test machine a late answer would be a fork here
        "DAC_ANSWERER_TIMEOUT": "1.5",
        "DAC_SLURM_LOG": str(tmp_path / "log"),
    }
    return tmp_path, env


def run(lua: str, env: dict, *words: str) -> subprocess.CompletedProcess:
    # as burst_buffer/datawarp runs GetSysStatus: the file itself, through its #! line, where
    # that names `lua`; under any other, `lua` runs the file, as a first line edited for it would
    command = [str(CLI)] if CLI.read_text().startswith(f"#!{lua}\n") else [lua, str(CLI)]
    return subprocess.run([*command, *words], env=env, capture_output=True, timeout=30)


def forked(tmp_path: Path) -> tuple[list[str], str] | None:
    f = tmp_path / "argv"
    if not f.exists():
        return None
    return f.read_text().splitlines(), (tmp_path / "caller").read_text()


def test_it_ships_executable_with_the_slurm_files():
    assert "dwstat.lua" in SLURM_FILES and "dwstat.lua" in SLURM_EXECUTABLES
    assert CLI.read_text().startswith("#!/usr/bin/lua5.1\n")
    assert os.access(CLI, os.X_OK)


@pytest.mark.parametrize(
    "words, line",
    [
        ([], "dac-answer/2 bbstat caller:\n"),
        (["sessions"], "dac-answer/2 bbstat caller: sessions\n"),
        (["51"], "dac-answer/2 bbstat caller: 51\n"),
        # any user's words, percent-encoded; an empty one as NUL (a line loses an empty last word)
        (
            ["--function", "paths", "a b", "", "$(id)"],
            "dac-answer/2 bbstat caller: --function paths a%20b %00 %24%28id%29\n",
        ),
    ],
)
def test_the_answer_is_the_answerers_byte_for_byte(lua, site, words, line):
    tmp_path, env = site
    body = b" pool units quantity free gran\ndefault bytes 4GiB 1GiB 1GiB\n\xc3\xa9"
    with FakeAnswerer(tmp_path / "socket", b"ANSWER 0 %d\n" % len(body) + body) as a:
        r = run(lua, env, *words)
    assert (r.returncode, r.stdout, r.stderr) == (0, body, b"")
    assert a.lines == [line]
    assert forked(tmp_path) is None
    assert not (tmp_path / "log").exists()


def test_the_caller_is_what_dac_bbstat_would_read(lua, site):
    # DAC_BBSTAT_CALLER in slurmctld's environment is a misconfiguration (docs/slurm.md), but
    # the answer must be dac-bbstat's under it too
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "socket", b"ANSWER 0 2\nok") as a:
        run(lua, {**env, "DAC_BBSTAT_CALLER": "1000:1000"}, "51")
    assert a.lines == ["dac-answer/2 bbstat caller:1000:1000 51\n"]


ODD = ["--function", "setup", "x y", "'z'", "$(id)`id`", ""]


def _fell_back(tmp_path: Path, r: subprocess.CompletedProcess, words: list[str]) -> None:
    assert forked(tmp_path) == (words, "")  # the same words, one for one, and no caller
    assert (r.returncode, r.stdout, r.stderr) == (0, b"dac-bbstat stdout\n", b"")


def test_no_socket_runs_dac_bbstat_with_the_same_words_and_says_nothing(lua, site):
    tmp_path, env = site
    r = run(lua, env, *ODD)
    _fell_back(tmp_path, r, ODD)
    assert not (tmp_path / "log").exists()  # no answerer installed: nothing to report


@pytest.mark.parametrize(
    "reply",
    [
        b"REFUSE the mirror is not confirmed current; etcd out of reach\n",
        b"REFUSE only job_process, pools and paths are answered here\n",  # an older answerer
        b"ANSWER 1 5\nnope\n",  # dac-bbstat always exits 0: anything else is not its answer
        b"ANSWER 0 100\nshort",
    ],
)
def test_anything_but_an_answer_runs_dac_bbstat_and_is_logged(lua, site, reply):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "socket", reply) as a:
        r = run(lua, env, *ODD)
    _fell_back(tmp_path, r, ODD)
    assert len(a.lines) == 1
    assert "running dac-bbstat" in (tmp_path / "log").read_text()


def test_a_slow_answerer_is_left_after_the_timeout_for_dac_bbstat(lua, site):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "socket", b"ANSWER 0 2\nno", delay=3.0):
        t = time.monotonic()
        r = run(lua, {**env, "DAC_ANSWERER_TIMEOUT": "0.3"}, "pools")
        took = time.monotonic() - t
    _fell_back(tmp_path, r, ["pools"])
    assert took < 2.5  # 0.3 s for the answerer, then the fork (slow under load)
    assert "timeout" in (tmp_path / "log").read_text()


def test_socket_none_never_asks(lua, site):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "socket", b"ANSWER 0 0\n") as a:
        r = run(lua, {**env, "DAC_ANSWERER_SOCKET": "none"}, "pools")
    _fell_back(tmp_path, r, ["pools"])
    assert a.lines == []


def test_without_lua_socket_it_runs_dac_bbstat(lua, site):
    tmp_path, env = site
    with FakeAnswerer(tmp_path / "socket", b"ANSWER 0 0\n") as a:
        # a Lua that finds no C modules: as on a controller without lua-socket
        r = run(lua, {**env, "LUA_CPATH": str(tmp_path / "none/?.so")}, "pools")
    _fell_back(tmp_path, r, ["pools"])
    assert a.lines == []
    assert "no lua-socket" in (tmp_path / "log").read_text()


@pytest.mark.parametrize("code", [0, 1, 3, 127, 255])
def test_dac_bbstats_exit_status_is_the_forwarders(lua, site, code):
    """os.execute answers Lua 5.1's way (a wait status) or 5.2+'s (true|nil, "exit", code):
    the forwarder exits with dac-bbstat's status under each."""
    tmp_path, env = site
    (tmp_path / "dac-bbstat").write_text(f"#!/bin/sh\necho out\nexit {code}\n")
    r = run(lua, env, "pools")
    assert (r.returncode, r.stdout) == (code, b"out\n")


def test_a_dac_bbstat_killed_by_a_signal_is_reported_as_a_shell_does(lua, site):
    tmp_path, env = site
    (tmp_path / "dac-bbstat").write_text("#!/bin/sh\nkill -TERM $$\n")
    r = run(lua, env, "pools")
    assert r.returncode == 128 + 15


def test_a_shell_that_cannot_start_is_exit_127(lua, no_new_process):
    """No process can start (RLIMIT_NPROC): glibc's system() gives Lua 5.1 to 5.3 its 127,
    and 5.4 an error instead; the forwarder exits 127 under each, as a shell would."""
    limit, where = no_new_process
    script = where / CLI.name
    script.write_bytes(CLI.read_bytes())
    env = {"PATH": os.environ["PATH"], "DAC_BBSTAT": "/bin/true", "DAC_ANSWERER_SOCKET": "none"}
    r = subprocess.run(
        [lua, str(script), "pools"], env=env, capture_output=True, timeout=30, preexec_fn=limit
    )
    assert (r.returncode, r.stdout, r.stderr) == (127, b"", b"")
