"""burst_buffer.lua's in-process path to dac's answerer (issue 34): job_process, pools and
paths ask the answerer's unix socket with lua-socket and take its answer; when the socket is
absent, the answerer refuses, is too slow, or lua-socket is missing, they fork dacctl as
before, with what is left of 2 s. get_status (`scontrol show bbstat`, issue 45) asks it too,
naming the caller Slurm names, and forks dac-bbstat when it gets no answer. A stand-in answerer
(a thread here) records each request."""

import json
import socket
import subprocess
import time

import pytest
from lua_answerer import SLURM_TABLE, FakeAnswerer

from daccore.share import asset
from dacservice.answerer.published import valid_name
from dacservice.answerer.wire import MAX_SCRIPT

LUA = asset("slurm", "burst_buffer.lua")

# the status as Slurm reads it (lua_tonumber): "%%d", as 5.3+ prints slurm.SUCCESS as 0.0;
# slurm.log_* write to stderr
HARNESS = (
    SLURM_TABLE
    + r"""
dofile(%(lua)s)
local rc, out = %(call)s
io.write(string.format("%%d", rc), "\n", tostring(out))
"""
)

FAKE_DACCTL = """#!/bin/sh
printf '%%s\\n' "$@" > %(dir)s/argv
printf '%%s' "$DAC_HOT_TIMEOUT" > %(dir)s/budget
echo forked
"""


# every test here under each Lua, in which lua-socket must load (conftest.py)
pytestmark = pytest.mark.usefixtures("lua_socket")


def hook(lua, tmp_path, lua_call, socket_path, **env):
    """(rc, message, dacctl's argv or None, DAC_HOT_TIMEOUT it got, seconds, lua's stderr)."""
    fake = tmp_path / "dacctl"
    fake.write_text(FAKE_DACCTL % {"dir": tmp_path})
    fake.chmod(0o755)
    for f in ("argv", "budget"):
        (tmp_path / f).unlink(missing_ok=True)
    script = tmp_path / "run.lua"
    script.write_text(HARNESS % {"lua": json.dumps(str(LUA)), "call": lua_call})
    started = time.monotonic()
    r = subprocess.run(
        [lua, str(script)],
        capture_output=True,
        text=True,
        timeout=20,
        env={
            "DACCTL": str(fake),
            "PATH": "/usr/bin:/bin",
            "DAC_ANSWERER_SOCKET": str(socket_path),
            # the site's 0.5 s is too tight for a loaded test machine (two cores, three suites
            # at once): a late answer would be a fork here; the timeout's own tests pass theirs
            "DAC_ANSWERER_TIMEOUT": "1.5",
            **env,
        },
    )
    took = time.monotonic() - started
    assert r.returncode == 0, r.stderr
    rc, _, message = r.stdout.partition("\n")
    argv = (tmp_path / "argv").read_text().splitlines() if (tmp_path / "argv").exists() else None
    budget = (tmp_path / "budget").read_text() if (tmp_path / "budget").exists() else None
    return int(rc), message, argv, budget, took, r.stderr


def test_the_answerers_answer_is_the_hooks_and_nothing_is_forked(lua, tmp_path):
    pools = '{"pools": [{"id": "default", "free": 4}]}\n'
    with FakeAnswerer(
        tmp_path / "s", b"ANSWER 0 %d\n" % len(pools) + pools.encode() + b"err\n"
    ) as a:
        rc, out, argv, _, _, _ = hook(lua, tmp_path, "slurm_bb_pools()", a.path)
    assert (rc, out, argv) == (0, pools.strip(), None)  # stderr is not part of the answer
    assert a.lines == ["dac-answer/1 pools\n"]


def test_a_refusing_answer_is_an_error_with_its_line(lua, tmp_path):
    line = b"line 3: jobdw: unknown pool 'x' (pools: default)\n"
    with FakeAnswerer(tmp_path / "s", b"ANSWER 1 %d\n" % len(line) + line) as a:
        rc, out, argv, _, _, _ = hook(lua, tmp_path, 'slurm_bb_job_process("/s/job 1%.sh")', a.path)
    assert (rc, out, argv) == (-1, line.decode().strip(), None)
    # every byte but letters, digits and -._/:=, percent-encoded
    assert a.lines == ["dac-answer/1 job_process --job /s/job%201%25.sh\n"]


@pytest.mark.parametrize("size", [1, 300, MAX_SCRIPT, MAX_SCRIPT + 1, None])
def test_job_process_sends_its_script_up_to_max_script(lua, tmp_path, size):
    """The script (slurmctld's own file) read in the hook and sent after the line, so the
    answerer opens no file; a longer one, or one that cannot be opened, is the answerer's to
    read from its path (dacservice/answerer/wire.py)."""
    job = tmp_path / "job.sh"
    data = (b"#!/bin/sh\n#DW jobdw capacity=1GiB\n" + b"x" * MAX_SCRIPT)[: size or 0]
    if size is not None:
        job.write_bytes(data)
    with FakeAnswerer(tmp_path / "s", b"ANSWER 0 0\n") as a:
        rc, _, argv, _, _, _ = hook(
            lua, tmp_path, f'slurm_bb_job_process("{job}", "1001", "1002")', a.path
        )
    assert (rc, argv) == (0, None)
    carried = size is not None and size <= MAX_SCRIPT
    assert a.lines == [f"dac-answer/{2 if carried else 1} job_process --job {job} --user 1001\n"]
    assert a.scripts == [data if size is not None and size <= MAX_SCRIPT else None]


# array_job_id as Slurm pushes it: lua_pushinteger (23.11+), or lua_pushnumber (a float on
# Lua 5.3+, printed 9.0 there)
@pytest.mark.parametrize("array", ["9", "9.0"])
def test_paths_sends_every_argument_slurm_gives_and_writes_the_lines_it_gets(lua, tmp_path, array):
    lines = b"DW_JOB_STRIPED=/mnt/dac/12/striped\n"
    pathfile = tmp_path / "path"
    pathfile.write_bytes(b"")  # as Slurm hands it
    with FakeAnswerer(tmp_path / "s", b"ANSWER 0 %d\n" % len(lines) + lines) as a:
        rc, out, argv, _, _, _ = hook(
            lua,
            tmp_path,
            f'slurm_bb_paths("12", "/s/script", "{pathfile}", "1001", "1002", '
            f"{{array_job_id = {array}}})",
            a.path,
        )
    assert (rc, out, argv) == (0, "", None)
    assert a.lines == [
        f"dac-answer/2 paths reply:pathfile --token 12 --job /s/script --pathfile {pathfile} "
        "--array-job 9\n"
    ]
    assert pathfile.read_bytes() == lines


@pytest.mark.parametrize("there", [None, b"old lines, longer than the new\n" * 3])
def test_paths_asks_the_answerer_to_write_a_path_file_it_cannot_write(lua, tmp_path, there):
    """24.11+: a job array's task whose job directory Slurm never made: dacctl makes it
    (daccore/services/slurm_args.py); a file not empty: Lua cannot cut it short. The answerer is
    asked again to write the file itself."""
    lines = b"DW_JOB_STRIPED=/mnt/dac/12/striped\n"
    pathfile = tmp_path / "hash.2" / "job.12" / "path"
    if there is not None:
        pathfile.parent.mkdir(parents=True)
        pathfile.write_bytes(there)
    with FakeAnswerer(tmp_path / "s", b"ANSWER 0 %d\n" % len(lines) + lines) as a:
        rc, out, argv, _, _, _ = hook(
            lua, tmp_path, f'slurm_bb_paths("12", "/s/script", "{pathfile}")', a.path
        )
    assert (rc, argv) == (0, None)
    words = f"--token 12 --job /s/script --pathfile {pathfile}\n"
    assert a.lines == [
        f"dac-answer/2 paths reply:pathfile {words}",
        f"dac-answer/1 paths {words}",
    ]
    assert (pathfile.read_bytes() if there else pathfile.exists()) == (there or False)


def test_no_socket_forks_dacctl_with_the_whole_budget(lua, tmp_path):
    rc, out, argv, budget, _, err = hook(
        lua, tmp_path, 'slurm_bb_job_process("/s/script")', tmp_path / "absent"
    )
    assert (rc, out) == (0, "forked")
    assert argv == ["--function", "job_process", "--job", "/s/script"]
    assert 1.9 <= float(budget) <= 2.0
    assert err == ""  # an answerer not installed is nothing to log


def test_a_refusal_forks_dacctl(lua, tmp_path):
    with FakeAnswerer(
        tmp_path / "s", b"REFUSE the mirror is not confirmed current; etcd out\n"
    ) as a:
        rc, out, argv, budget, _, err = hook(lua, tmp_path, "slurm_bb_pools()", a.path)
    assert (rc, out, argv) == (0, "forked", ["--function", "pools"])
    assert "the mirror is not confirmed current" in err  # slurmctld's log says why
    assert 1.5 < float(budget) <= 2.0


def test_a_slow_answerer_is_given_up_on_time_and_the_fork_gets_the_rest(lua, tmp_path):
    with FakeAnswerer(tmp_path / "s", b"ANSWER 0 0\n", delay=3.0) as a:
        rc, out, argv, budget, took, _ = hook(
            lua, tmp_path, "slurm_bb_pools()", a.path, DAC_ANSWERER_TIMEOUT="0.3"
        )
    assert (rc, out, argv) == (0, "forked", ["--function", "pools"])
    assert 1.6 <= float(budget) <= 1.75  # 2 s less the 0.3 s waited
    assert took < 1.5


def test_a_socket_nobody_listens_on_forks_dacctl(lua, tmp_path):
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(tmp_path / "s"))
    dead.close()  # the file stays: an answerer that died
    rc, out, argv, _, _, _ = hook(lua, tmp_path, "slurm_bb_pools()", tmp_path / "s")
    assert (rc, out, argv) == (0, "forked", ["--function", "pools"])


def test_without_lua_socket_the_hooks_fork_as_before(lua, tmp_path):
    with FakeAnswerer(tmp_path / "s", b"ANSWER 0 3\nnot") as a:
        rc, out, argv, budget, _, _ = hook(
            lua,
            tmp_path,
            "slurm_bb_pools()",
            a.path,
            LUA_CPATH="/nonexistent/?.so",
            LUA_PATH="/nonexistent/?.lua",
        )
    assert (rc, out, argv, budget) == (0, "forked", ["--function", "pools"], "")
    assert a.lines == []


def test_none_turns_the_answerer_off(lua, tmp_path):
    rc, out, argv, _, _, _ = hook(lua, tmp_path, "slurm_bb_pools()", "none")
    assert (rc, out, argv) == (0, "forked", ["--function", "pools"])


def test_the_other_hooks_never_ask_the_answerer(lua, tmp_path):
    with FakeAnswerer(tmp_path / "s", b"ANSWER 0 0\n") as a:
        rc, out, argv, _, _, _ = hook(lua, tmp_path, 'slurm_bb_data_in("7", "/s")', a.path)
    assert (rc, out, argv[:2]) == (0, "forked", ["--function", "data_in"])
    assert a.lines == []


def _pools_file(tmp_path, expires_in: int, body: str, rc: int = 0, n: int | None = None):
    head = "dac-pools/1 %d %d %d\n" % (
        int(time.time()) + expires_in,
        rc,
        len(body) if n is None else n,
    )
    (tmp_path / "pools").write_text(head + body)


def test_pools_reads_the_answerers_file_and_asks_nothing(lua, tmp_path):
    pools = '{"pools": [{"id": "default", "free": 4}]}'
    _pools_file(tmp_path, 2, pools)
    with FakeAnswerer(tmp_path / "s", b"ANSWER 0 3\nnot") as a:
        rc, out, argv, _, _, _ = hook(lua, tmp_path, "slurm_bb_pools()", a.path)
        _pools_file(tmp_path, 2, "line 1: etcd said no", rc=1)
        failed = hook(lua, tmp_path, "slurm_bb_pools()", a.path)
    assert (rc, out, argv) == (0, pools, None)
    assert failed[:3] == (-1, "line 1: etcd said no", None)  # its exit status, as asked
    assert a.lines == []


@pytest.mark.parametrize(
    "expires_in, body, n",
    [
        (0, "{}", None),  # expired: an answerer stopped or hung left it
        (-30, "{}", None),
        (10, "{}", None),  # dated ahead: the clock was set back since it was written
        (2, "{}", 5),  # cut short
    ],
)
def test_pools_asks_the_socket_when_the_file_is_not_to_be_believed(
    lua, tmp_path, expires_in, body, n
):
    _pools_file(tmp_path, expires_in, body, n=n)
    with FakeAnswerer(tmp_path / "s", b"ANSWER 0 6\nasked!") as a:
        rc, out, argv, _, _, _ = hook(lua, tmp_path, "slurm_bb_pools()", a.path)
    assert (rc, out, argv) == (0, "asked!", None)
    assert a.lines == ["dac-answer/1 pools\n"]


def test_none_reads_no_pools_file(lua, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # "none" has no directory: a "pools" here must not be read
    _pools_file(tmp_path, 2, "from the file")
    rc, out, argv, _, _, _ = hook(lua, tmp_path, "slurm_bb_pools()", "none")
    assert (rc, out, argv) == (0, "forked", ["--function", "pools"])


def _paths_file(tmp_path, job: str, text: bytes, n: int | None = None) -> None:
    (tmp_path / "paths").mkdir(exist_ok=True)
    head = b"dac-paths/1 %d\n" % (len(text) if n is None else n)
    (tmp_path / "paths" / job).write_bytes(head + text)


def test_paths_reads_the_jobs_paths_file_and_asks_nothing(lua, tmp_path):
    """The answerer's paths file (dacservice/answerer/published.py), believed while the pools
    file is: its text becomes the job's path file, and the answerer is not woken."""
    text = b"DW_JOB_STRIPED=/mnt/dac/12/striped\nDW_PERSISTENT_STRIPED_p=/mnt/dac/12/ps/p\n"
    _pools_file(tmp_path, 2, "{}")
    _paths_file(tmp_path, "12", text)
    _paths_file(tmp_path, "13", b"DW_JOB_PRIVATE=/not/this/job\n")
    pathfile = tmp_path / "path"
    pathfile.write_bytes(b"")  # as Slurm hands it
    with FakeAnswerer(tmp_path / "s", b"ANSWER 0 6\nasked!") as a:
        rc, out, argv, _, _, _ = hook(
            lua,
            tmp_path,
            f'slurm_bb_paths("12", "/s/script", "{pathfile}", "1001", "1002")',
            a.path,
        )
    assert (rc, out, argv) == (0, "", None)
    assert a.lines == []
    assert pathfile.read_bytes() == text


@pytest.mark.parametrize(
    "pools, job, n, there",
    [
        (None, "12", None, b""),  # no pools file: the answerer's mirror is not vouched for
        (0, "12", None, b""),  # an expired one: an answerer stopped or hung left them
        (2, "13", None, b""),  # no file for this job (no buffer of its own)
        (2, "12", 3, b""),  # cut short
        (2, "12", None, b"x"),  # a path file not empty: Lua cannot cut it short
    ],
)
def test_paths_asks_the_socket_when_its_file_is_not_to_be_believed(
    lua, tmp_path, pools, job, n, there
):
    if pools is not None:
        _pools_file(tmp_path, pools, "{}")
    _paths_file(tmp_path, job, b"DW_JOB_STRIPED=/from/the/file\n", n)
    lines = b"DW_JOB_STRIPED=/asked\n"
    pathfile = tmp_path / "path"
    pathfile.write_bytes(there)
    with FakeAnswerer(tmp_path / "s", b"ANSWER 0 %d\n" % len(lines) + lines) as a:
        rc, _, argv, _, _, _ = hook(
            lua, tmp_path, f'slurm_bb_paths("12", "/s/script", "{pathfile}")', a.path
        )
    assert (rc, argv) == (0, None)
    assert (
        a.lines[0] == f"dac-answer/2 paths reply:pathfile --token 12 --job /s/script "
        f"--pathfile {pathfile}\n"
    )
    if not there:
        assert pathfile.read_bytes() == lines


def test_paths_reads_no_file_of_a_job_id_that_is_not_one(lua, tmp_path):
    _pools_file(tmp_path, 2, "{}")
    (tmp_path / "elsewhere").write_bytes(b"dac-paths/1 6\nX=1\n\n")
    pathfile = tmp_path / "path"
    pathfile.write_bytes(b"")
    lines = b"asked\n"
    with FakeAnswerer(tmp_path / "s", b"ANSWER 0 %d\n" % len(lines) + lines) as a:
        rc, _, argv, _, _, _ = hook(
            lua, tmp_path, f'slurm_bb_paths("../elsewhere", "/s/script", "{pathfile}")', a.path
        )
    assert (rc, argv) == (0, None)
    assert len(a.lines) == 1 and pathfile.read_bytes() == lines


def _valid_file(tmp_path, words: str, script: bytes, stored=None) -> None:
    """The answerer's valid file of (words, script) (dacservice/answerer/published.py), holding
    `stored` (words, script) instead when given (a name two requests share)."""
    (tmp_path / "valid").mkdir(exist_ok=True)
    w, s = stored or (words, script)
    head = b"dac-valid/1 %d %d\n" % (len(w.encode()), len(s))
    (tmp_path / "valid" / valid_name(words, script)).write_bytes(head + w.encode() + s)


SCRIPT = b"#!/bin/sh\n#DW jobdw capacity=1GiB access_mode=striped\nsrun x\n"
#: a script long enough that valid_name samples every 781st byte, its hash past 2^32 before
#: each modulo: integers on Lua 5.3+, doubles on 5.1 and 5.2, the same name on each
LONG_SCRIPT = SCRIPT + bytes(range(256)) * 195


@pytest.mark.parametrize("data", [SCRIPT, LONG_SCRIPT], ids=["short", "long"])
def test_job_process_kept_valid_by_the_answerer_is_answered_without_asking(lua, tmp_path, data):
    """Its valid file (the request's words and script, whole), believed while the pools file
    is: success at once, and the answerer is not woken."""
    script = tmp_path / "job.sh"
    script.write_bytes(data)
    _pools_file(tmp_path, 2, "{}")
    _valid_file(tmp_path, "--user 1001", data)
    with FakeAnswerer(tmp_path / "s", b"REFUSE asked\n") as a:
        rc, out, argv, _, _, _ = hook(
            lua, tmp_path, f'slurm_bb_job_process("{script}", "1001", "1002")', a.path
        )
        old = hook(lua, tmp_path, f'slurm_bb_job_process("{script}")', a.path)  # 22.05: no uid
    assert (rc, out, argv) == (0, "", None)
    assert a.lines == [f"dac-answer/2 job_process --job {script}\n"]  # the 22.05 call alone
    assert a.scripts == [data]
    assert old[:3] == (0, "forked", ["--function", "job_process", "--job", str(script)])


@pytest.mark.parametrize(
    "pools, words, stored",
    [
        (None, "--user 1001", None),  # no pools file: the answerer's mirror is not vouched for
        (0, "--user 1001", None),  # expired
        (2, "--user 1002", None),  # kept for another user
        (2, "--user 1001", ("--user 1001", SCRIPT + b"rm -rf x\n")),  # another script's
        (2, "--user 1001", ("--user 10011", SCRIPT)),  # another user's, by its name
    ],
)
def test_job_process_asks_when_no_valid_file_holds_its_very_request(
    lua, tmp_path, pools, words, stored
):
    script = tmp_path / "job.sh"
    script.write_bytes(SCRIPT)
    if pools is not None:
        _pools_file(tmp_path, pools, "{}")
    _valid_file(tmp_path, words, SCRIPT, stored)
    with FakeAnswerer(tmp_path / "s", b"ANSWER 1 9\nline 2: x") as a:
        rc, out, argv, _, _, _ = hook(
            lua, tmp_path, f'slurm_bb_job_process("{script}", "1001", "1002")', a.path
        )
    assert (rc, out, argv) == (-1, "line 2: x", None)  # the answerer's refusal, as asked
    assert a.lines == [f"dac-answer/2 job_process --job {script} --user 1001\n"]
    assert a.scripts == [SCRIPT]


FAKE_BBSTAT = """#!/bin/sh
for a; do printf '%%s\\n' "$a"; done > %(dir)s/bbstat-argv
printf '%%s' "$DAC_BBSTAT_CALLER" > %(dir)s/bbstat-caller
echo "forked bbstat"
"""


def get_status(lua, tmp_path, words: str, socket_path, version: str = "22.05", **env):
    """slurm_bb_get_status(<words>) as `version`'s slurmctld calls it, with a stand-in
    dac-bbstat: (rc, message, (its argv, DAC_BBSTAT_CALLER) or None, seconds, lua's stderr)."""
    fake = tmp_path / "dac-bbstat"
    fake.write_text(FAKE_BBSTAT % {"dir": tmp_path})
    fake.chmod(0o755)
    for f in ("bbstat-argv", "bbstat-caller"):
        (tmp_path / f).unlink(missing_ok=True)
    marker = "slurm.ESLURM_BURST_BUFFER_PERMISSION = 2035\n" if version != "22.05" else ""
    script = tmp_path / "run.lua"
    script.write_text(
        HARNESS.replace("dofile(", marker + "dofile(")
        % {"lua": json.dumps(str(LUA)), "call": f"slurm_bb_get_status({words})"}
    )
    started = time.monotonic()
    r = subprocess.run(
        [lua, str(script)],
        capture_output=True,
        text=True,
        timeout=20,
        env={
            "DAC_BBSTAT": str(fake),
            "DACCTL": "/nonexistent",
            "PATH": "/usr/bin:/bin",
            "DAC_ANSWERER_SOCKET": str(socket_path),
            "DAC_ANSWERER_TIMEOUT": "1.5",  # as hook() says
            **env,
        },
    )
    took = time.monotonic() - started
    assert r.returncode == 0, r.stderr
    rc, _, message = r.stdout.partition("\n")
    forked = None
    if (tmp_path / "bbstat-argv").exists():
        forked = (
            (tmp_path / "bbstat-argv").read_text().splitlines(),
            (tmp_path / "bbstat-caller").read_text(),
        )
    return int(rc), message, forked, took, r.stderr


@pytest.mark.parametrize(
    "version, words, line",
    [
        ("22.05", "", "dac-answer/2 bbstat caller:\n"),
        ("22.05", "'42'", "dac-answer/2 bbstat caller: 42\n"),
        # 22.05 passes only the user's words: two numbers there name no one
        ("22.05", "'0', '0', '42'", "dac-answer/2 bbstat caller: 0 0 42\n"),
        ("23.02", "'1234', '4321', '42'", "dac-answer/2 bbstat caller:1234:4321 42\n"),
        ("23.02", "'1234', '4321'", "dac-answer/2 bbstat caller:1234:4321\n"),
        ("23.02", "'x', '4321', '42'", "dac-answer/2 bbstat caller: 42\n"),
        # every byte but letters, digits and -._/:=, percent-encoded; an empty word as NUL
        (
            "22.05",
            "'--function', 'a b', '', \"x'y\", ''",
            "dac-answer/2 bbstat caller: --function a%20b %00 x%27y %00\n",
        ),
    ],
)
def test_get_status_is_the_answerers_answer_and_nothing_is_forked(
    lua, tmp_path, version, words, line
):
    """`scontrol show bbstat`: asked in this process (issue 45), the caller as Slurm names it
    (23.02+) or no one (22.05), dac-bbstat's stdout given back as the fork's would be."""
    text = b"buffer 42: created -> staged_in, stage_in\n"
    with FakeAnswerer(tmp_path / "s", b"ANSWER 0 %d\n" % len(text) + text) as a:
        rc, out, forked, _, err = get_status(lua, tmp_path, words, a.path, version)
    assert (rc, out, forked, err) == (0, text.decode().strip(), None, "")
    assert a.lines == [line]


@pytest.mark.parametrize(
    "reply",
    [
        b"REFUSE the mirror is not confirmed current; etcd out of reach\n",
        # an answerer older than bbstat: nothing lost, only speed
        b"REFUSE only job_process, pools and paths are answered here\n",
        b"ANSWER 1 5\nnope\n",  # dac-bbstat always exits 0: anything else is not its answer
        b"ANSWER 0 100\ncut short",
    ],
)
def test_get_status_forks_dac_bbstat_when_the_answerer_does_not_answer(lua, tmp_path, reply):
    with FakeAnswerer(tmp_path / "s", reply) as a:
        rc, out, forked, _, err = get_status(lua, tmp_path, "'1234', '4321', '42'", a.path, "23.02")
    assert (rc, out, forked) == (0, "forked bbstat", (["42"], "1234:4321"))
    assert len(a.lines) == 1
    assert "forking dac-bbstat" in err  # slurmctld's log says why


def test_get_status_forks_when_there_is_no_answerer_and_says_nothing(lua, tmp_path):
    rc, out, forked, _, err = get_status(lua, tmp_path, "'0', '0', '42'", tmp_path / "absent")
    assert (rc, out, forked, err) == (0, "forked bbstat", (["0", "0", "42"], ""), "")


def test_get_status_leaves_a_slow_answerer_for_dac_bbstat(lua, tmp_path):
    with FakeAnswerer(tmp_path / "s", b"ANSWER 0 2\nno", delay=3.0):
        rc, out, forked, took, _ = get_status(
            lua, tmp_path, "'42'", tmp_path / "s", DAC_ANSWERER_TIMEOUT="0.3"
        )
    assert (rc, out, forked) == (0, "forked bbstat", (["42"], ""))
    assert took < 2.5


@pytest.mark.parametrize(
    "env", [{"DAC_ANSWERER_SOCKET": "none"}, {"LUA_CPATH": "/nonexistent/?.so"}]
)
def test_get_status_forks_when_the_answerer_is_off_or_lua_socket_missing(lua, tmp_path, env):
    with FakeAnswerer(tmp_path / "s", b"ANSWER 0 3\nnot") as a:
        rc, out, forked, _, _ = get_status(
            lua, tmp_path, "'1234', '4321', 'pools'", a.path, "23.02", **env
        )
    assert (rc, out, forked) == (0, "forked bbstat", (["pools"], "1234:4321"))
    assert a.lines == []
