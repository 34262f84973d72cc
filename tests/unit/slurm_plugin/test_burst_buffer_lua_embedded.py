"""burst_buffer.lua in each liblua, 5.1 to 5.4, embedded as slurmctld embeds it (lua_host.py: a
fresh Lua state a call, Slurm's `slurm` table, whose numbers are floats on 5.3+, the hook given
Slurm's string arguments and job_info, its status read back with lua_tonumber): every hook,
both ways a hook goes, in-process (a stand-in answerer, the answerer's files) and forked
(a stand-in dacctl). And what only a C host shows: lua-socket's socket.unix stays mapped
after lua_close on every version (5.1, 5.2 and 5.4 name their C libraries' closer in the
registry, 5.3 keys it by a C address), so the next call neither maps nor relocates it again."""

import ctypes.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lua_answerer import SLURM_TABLE, FakeAnswerer, missing

from daccore.share import asset

LUA = asset("slurm", "burst_buffer.lua")
HOST = Path(__file__).with_name("lua_host.py")

FAKE_DACCTL = """#!/bin/sh
printf '%%s\\037' "$@" >> %(dir)s/argv
echo >> %(dir)s/argv
%(body)s
"""


@pytest.fixture
def liblua(lua_socket) -> str:
    """The liblua of the Lua `lua_socket` is (liblua5.4.so.0 for lua5.4), as Slurm dlopens
    it; lua-socket loads in that Lua."""
    name = Path(lua_socket).name  # lua5.4
    found = ctypes.util.find_library(name)
    if found is None:
        missing(f"lib{name} is not installed")
    return found


def host(liblua, tmp_path, calls, *, script=LUA, marker="", **env) -> list[dict]:
    """Each of `calls` ((hook, [args], job_info or None)) made in one slurmctld stand-in, in
    order: their results (lua_host.py)."""
    spec = tmp_path / "calls.json"
    spec.write_text(
        json.dumps(
            {
                "slurm": SLURM_TABLE + marker,
                "calls": [{"hook": h, "args": a, "job_info": j} for h, a, j in calls],
            }
        )
    )
    r = subprocess.run(
        [sys.executable, str(HOST), liblua, str(script), str(spec)],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            "DACCTL": str(tmp_path / "dacctl"),
            "DAC_BBSTAT": "/nonexistent/dac-bbstat",
            "DAC_ANSWERER_SOCKET": str(tmp_path / "s"),
            # not the site's 0.5 s: a late answer on a loaded test machine would be a fork
            "DAC_ANSWERER_TIMEOUT": "1.5",
            **env,
        },
    )
    assert r.returncode == 0, r.stderr
    results = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(results) == len(calls)
    return results


def fake_dacctl(tmp_path, body="echo done"):
    (tmp_path / "dacctl").write_text(FAKE_DACCTL % {"dir": tmp_path, "body": body})
    (tmp_path / "dacctl").chmod(0o755)


def argvs(tmp_path) -> list[list[str]]:
    f = tmp_path / "argv"
    return [line.split("\x1f")[:-1] for line in f.read_text().splitlines()] if f.exists() else []


#: (hook, Slurm's arguments, job_info), and the words after dacctl's --function
FORKED = [
    (
        ("slurm_bb_setup", ["7", "1001", "1002", "default", "1073741824", "/s"], None),
        "setup --token 7 --caller SLURM --user 1001 --groupid 1002 "
        "--capacity default:1073741824 --job /s",
    ),
    (("slurm_bb_data_in", ["7", "/s"], None), "data_in --token 7 --job /s"),
    (("slurm_bb_real_size", ["7"], None), "real_size --token 7"),
    (
        ("slurm_bb_pre_run", ["7", "/s", "1001", "1002"], '{nodes = "n[1-2]", node_cnt = 2.0}'),
        "pre_run --token 7 --job /s --nodes n[1-2]",
    ),
    (("slurm_bb_post_run", ["7", "/s", "1001", "1002"], "{}"), "post_run --token 7 --job /s"),
    (("slurm_bb_data_out", ["7", "/s", "1001", "1002"], "{}"), "data_out --token 7 --job /s"),
    (("slurm_bb_job_teardown", ["7", "/s", "true"], None), "teardown --token 7 --job /s --hurry"),
    # no answerer (its socket absent): the three answered hooks fork too
    (("slurm_bb_job_process", ["/s", "1001", "1002"], "{}"), "job_process --job /s --user 1001"),
    (("slurm_bb_pools", [], None), "pools"),
    (
        ("slurm_bb_paths", ["7", "/s", "/p", "1001", "1002"], "{array_job_id = 5.0}"),
        "paths --token 7 --job /s --pathfile /p --array-job 5",
    ),
]


def test_every_hook_that_forks_runs_dacctl_as_slurmctld_calls_it(liblua, tmp_path):
    fake_dacctl(tmp_path)
    results = host(liblua, tmp_path, [c for c, _ in FORKED])
    assert [(r["error"], r["rc"]) for r in results] == [(None, 0)] * len(FORKED)
    # real_size: the capacity in dacctl's JSON, none in "done"
    assert [r["out"] for r in results] == [
        "0" if words.startswith("real_size") else "done" for _, words in FORKED
    ]
    assert argvs(tmp_path) == [["--function", *words.split()] for _, words in FORKED]


def test_a_failing_dacctl_is_slurm_error_with_its_line(liblua, tmp_path):
    fake_dacctl(tmp_path, "echo 'line 2: jobdw: nope'; exit 1")
    (result,) = host(liblua, tmp_path, [("slurm_bb_job_process", ["/s"], None)])
    assert (result["error"], result["rc"], result["out"]) == (None, -1, "line 2: jobdw: nope")


def test_the_hooks_that_never_fork_answer_at_once(liblua, tmp_path):
    calls = [(f"slurm_bb_test_data_{way}", ["7", "/s"], None) for way in ("in", "out")]
    assert [(r["error"], r["rc"], r["out"]) for r in host(liblua, tmp_path, calls)] == [
        (None, 0, "")
    ] * 2


def test_the_answered_hooks_are_answered_in_process(liblua, tmp_path):
    """job_process, pools, paths and get_status (23.02+: the caller Slurm names) asked of the
    answerer's socket: its answers are the hooks', and nothing forks."""
    fake_dacctl(tmp_path)
    job = tmp_path / "job.sh"
    job.write_bytes(b"#!/bin/sh\n#DW jobdw capacity=1GiB\n")
    pathfile = tmp_path / "path"
    pathfile.write_bytes(b"")  # as Slurm hands it
    reply = b"DW_JOB_STRIPED=/mnt/x\n"
    with FakeAnswerer(tmp_path / "s", b"ANSWER 0 %d\n" % len(reply) + reply) as a:
        results = host(
            liblua,
            tmp_path,
            [
                ("slurm_bb_job_process", [str(job), "1001", "1002"], "{}"),
                ("slurm_bb_pools", [], None),
                (
                    "slurm_bb_paths",
                    ["12", "/s", str(pathfile), "1001", "1002"],
                    "{array_job_id = 9.0}",
                ),
                ("slurm_bb_get_status", ["1234", "4321", "42"], None),
            ],
            marker="slurm.ESLURM_BURST_BUFFER_PERMISSION = 2035.0\n",
        )
    text = reply.decode().strip()
    assert [(r["error"], r["rc"], r["out"]) for r in results] == [
        (None, 0, text),
        (None, 0, text),
        (None, 0, ""),  # paths writes its lines into Slurm's path file
        (None, 0, text),
    ]
    assert pathfile.read_bytes() == reply
    assert a.lines == [
        f"dac-answer/2 job_process --job {job} --user 1001\n",
        "dac-answer/1 pools\n",
        f"dac-answer/2 paths reply:pathfile --token 12 --job /s --pathfile {pathfile} "
        "--array-job 9\n",
        "dac-answer/2 bbstat caller:1234:4321 42\n",
    ]
    assert argvs(tmp_path) == []


def test_pools_from_the_answerers_file_asks_nothing(liblua, tmp_path):
    fake_dacctl(tmp_path)
    body = '{"pools": []}'
    (tmp_path / "pools").write_text(f"dac-pools/1 {int(time.time()) + 2} 0 {len(body)}\n{body}")
    with FakeAnswerer(tmp_path / "s", b"REFUSE asked\n") as a:
        (result,) = host(liblua, tmp_path, [("slurm_bb_pools", [], None)])
    assert (result["error"], result["rc"], result["out"]) == (None, 0, body)
    assert a.lines == [] and argvs(tmp_path) == []


def test_socket_unix_stays_mapped_when_the_state_closes(liblua, tmp_path):
    """After the first call's lua_close lua-socket's socket.unix is still mapped, and no call
    maps another copy. The control, a script that loads socket.unix and leaves its closer be:
    lua_close unmaps it, so it is burst_buffer.lua that keeps it."""
    with FakeAnswerer(tmp_path / "s", b"ANSWER 0 2\n{}"):
        results = host(liblua, tmp_path, [("slurm_bb_pools", [], None)] * 3)
    assert [r["out"] for r in results] == ["{}"] * 3
    kept = results[0]["left"]
    assert len(kept) == 1 and "unix" in Path(kept[0]).name, kept
    assert [r["left"] for r in results] == [kept] * 3
    control = tmp_path / "control.lua"
    control.write_text(
        'package.path = ""\nrequire("socket.unix")\n'
        "function slurm_bb_pools() return slurm.SUCCESS, 'control' end\n"
    )
    (result,) = host(liblua, tmp_path, [("slurm_bb_pools", [], None)], script=control)
    assert (result["out"], result["left"]) == ("control", [])
