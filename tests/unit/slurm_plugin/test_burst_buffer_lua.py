"""slurm-plugin/burst_buffer.lua under each Lua, 5.1 (Debian's slurmctld embeds it) to 5.4
(RHEL's), with the `slurm` table Slurm gives it (lua_answerer.SLURM_TABLE, its log lines
dropped) and a stand-in dacctl that records its argv. The script is loaded as Slurm loads it
for every call, then one hook called; these are the hooks that fork (and the answered three
when there is no answerer): test_burst_buffer_lua_answerer.py has the in-process path, and
test_burst_buffer_lua_embedded.py each liblua as slurmctld embeds it."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from lua_answerer import SLURM_TABLE, missing

from daccore.share import asset
from dacctl.slurm_files import lua_bytecode_of

LUA = asset("slurm", "burst_buffer.lua")

# the status as Slurm reads it (lua_tonumber): "%%d", as 5.3+ prints slurm.SUCCESS as 0.0
HARNESS = (
    SLURM_TABLE
    + r"""
slurm.log = function() end
slurm.error = slurm.log
dofile(%(lua)s)
local rc, out = %(call)s
io.write(string.format("%%d", rc), "\n", tostring(out))
"""
)

FAKE_DACCTL = """#!/bin/sh
printf '%%s\\n' "$@" > %(argv)s
%(body)s
"""


def call(lua, tmp_path, lua_call, body="exit 0"):
    """Run one hook under `lua`; returns (rc, message, argv dacctl received)."""
    argv_file = tmp_path / "argv"
    argv_file.unlink(missing_ok=True)
    fake = tmp_path / "dacctl"
    fake.write_text(FAKE_DACCTL % {"argv": argv_file, "body": body})
    fake.chmod(0o755)
    script = tmp_path / "run.lua"
    script.write_text(HARNESS % {"lua": json.dumps(str(LUA)), "call": lua_call})
    r = subprocess.run(
        [lua, str(script)],
        capture_output=True,
        text=True,
        timeout=20,
        # no answerer (its socket absent): job_process, pools and paths fork too
        env={
            "DACCTL": str(fake),
            "PATH": "/usr/bin:/bin",
            "DAC_ANSWERER_SOCKET": str(tmp_path / "no-answerer"),
        },
    )
    assert r.returncode == 0, r.stderr
    rc, _, message = r.stdout.partition("\n")
    argv = argv_file.read_text().splitlines() if argv_file.exists() else None
    return int(rc), message, argv


def test_setup_maps_onto_the_datawarp_argv(lua, tmp_path):
    rc, _, argv = call(
        lua,
        tmp_path,
        'slurm_bb_setup("12", "1001", "1002", "default", "1073741824", "/state/job.12/script", {})',
    )
    assert rc == 0
    assert argv == [
        "--function",
        "setup",
        "--token",
        "12",
        "--caller",
        "SLURM",
        "--user",
        "1001",
        "--groupid",
        "1002",
        "--capacity",
        "default:1073741824",
        "--job",
        "/state/job.12/script",
    ]


@pytest.mark.parametrize(
    "lua_call, words",
    [
        ('slurm_bb_data_in("7", "/s")', ["data_in", "--token", "7", "--job", "/s"]),
        ('slurm_bb_pre_run("7", "/s")', ["pre_run", "--token", "7", "--job", "/s"]),
        (
            'slurm_bb_post_run("7", "/s", "1001", "1001", {})',
            ["post_run", "--token", "7", "--job", "/s"],
        ),
        (
            'slurm_bb_data_out("7", "/s", "1001", "1001", {})',
            ["data_out", "--token", "7", "--job", "/s"],
        ),
        ('slurm_bb_job_teardown("7", "/s", "false")', ["teardown", "--token", "7", "--job", "/s"]),
        ('slurm_bb_real_size("7")', ["real_size", "--token", "7"]),
        ("slurm_bb_pools()", ["pools"]),
        ('slurm_bb_job_process("/s")', ["job_process", "--job", "/s"]),
        (
            'slurm_bb_paths("7", "/s", "/p")',
            ["paths", "--token", "7", "--job", "/s", "--pathfile", "/p"],
        ),
    ],
)
def test_every_hook_that_forks_runs_dacctl_and_succeeds_with_it(lua, tmp_path, lua_call, words):
    """Each hook Slurm may call that forks (the answered three too, with no answerer), under
    every Lua: Lua 5.3 and 5.4 have no loadstring, with which these were compiled (issue 46)."""
    rc, out, argv = call(lua, tmp_path, lua_call, "echo done")
    assert (rc, argv) == (0, ["--function", *words])
    assert out == ("0" if words[0] == "real_size" else "done")  # real_size: no capacity named


def test_job_process_passes_the_uid_only_when_slurm_gives_one(lua, tmp_path):
    _, _, argv = call(lua, tmp_path, 'slurm_bb_job_process("/s/script")')
    assert argv == ["--function", "job_process", "--job", "/s/script"]
    _, _, argv = call(lua, tmp_path, 'slurm_bb_job_process("/s/script", "1001", "1002", {})')
    assert argv[-2:] == ["--user", "1001"]


def test_teardown_hurry_and_every_argument_reaches_dacctl_unharmed(lua, tmp_path):
    evil = "$(touch /tmp/pwned) `id` ; ' \" \\\\"
    _, _, argv = call(lua, tmp_path, f'slurm_bb_job_teardown("7", {json.dumps(evil)}, "true")')
    assert argv == ["--function", "teardown", "--token", "7", "--job", evil, "--hurry"]
    assert not Path("/tmp/pwned").exists()


def test_stdout_is_the_result_and_pools_json_passes_through(lua, tmp_path):
    pools = '{"pools": [{"id": "default", "granularity": 1, "quantity": 8, "free": 8}]}'
    rc, out, _ = call(lua, tmp_path, "slurm_bb_pools()", f"echo '{pools}'")
    assert (rc, out) == (0, pools)
    rc, out, _ = call(
        lua,
        tmp_path,
        'slurm_bb_real_size("7")',
        'echo \'{"token": "7", "capacity": 134217728, "units": "bytes"}\'',
    )
    assert (rc, out) == (0, "134217728")


def test_a_failing_dacctl_is_an_error_with_its_line(lua, tmp_path):
    rc, out, _ = call(
        lua,
        tmp_path,
        'slurm_bb_job_process("/s")',
        "echo 'line 2: jobdw: capacity is required'; exit 1",
    )
    assert (rc, out) == (-1, "line 2: jobdw: capacity is required")


def test_a_failure_without_a_word_names_its_exit_code(lua, tmp_path):
    rc, out, _ = call(lua, tmp_path, 'slurm_bb_setup("7", "1", "1", "p", "1", "/s")', "exit 3")
    assert (rc, out) == (-1, "dac: setup failed with exit code 3")


@pytest.mark.parametrize(
    "body,message",
    [
        ("kill -TERM $$", "partial"),  # dacctl itself killed: exit status 143
        ("kill -KILL $$", "partial"),
        # Slurm's timeout SIGTERMs the whole process group, the shell around dacctl included, so no
        # exit status is ever printed; 22.05 would then trust whatever the Lua returns.
        ("kill -TERM $PPID; sleep 1", "dac: data_in was killed before it finished"),
    ],
)
def test_a_killed_dacctl_is_an_error_never_success(lua, tmp_path, body, message):
    rc, out, _ = call(lua, tmp_path, 'slurm_bb_data_in("7", "/s")', f"echo partial; {body}")
    assert (rc, out) == (-1, message)


def test_every_hook_slurm_may_call_is_defined(lua, tmp_path):
    hooks = [
        "slurm_bb_job_process",
        "slurm_bb_pools",
        "slurm_bb_job_teardown",
        "slurm_bb_setup",
        "slurm_bb_data_in",
        "slurm_bb_test_data_in",
        "slurm_bb_real_size",
        "slurm_bb_paths",
        "slurm_bb_pre_run",
        "slurm_bb_post_run",
        "slurm_bb_data_out",
        "slurm_bb_test_data_out",
        "slurm_bb_get_status",
    ]
    check = " and ".join(f'type({h}) == "function"' for h in hooks)
    rc, out, _ = call(lua, tmp_path, f"0, tostring({check})")
    assert out == "true"


def test_test_data_in_and_out_succeed_at_once(lua, tmp_path):
    for hook in ("slurm_bb_test_data_in", "slurm_bb_test_data_out"):
        assert call(lua, tmp_path, f'{hook}("7", "/s")') == (0, "", None)


def bbstat(lua, tmp_path, lua_call, version="22.05"):
    """get_status with a stand-in dac-bbstat; returns (rc, its argv, DAC_BBSTAT_CALLER)."""
    fake = tmp_path / "dac-bbstat"
    fake.write_text(
        '#!/bin/sh\nfor a in "$@"; do printf \'%s\\n\' "$a"; done '
        f"> {tmp_path}/argv\n"
        f"printf '%s' \"$DAC_BBSTAT_CALLER\" > {tmp_path}/caller\necho shown\n"
    )
    fake.chmod(0o755)
    # lua_pushnumber's, as Slurm's error table is
    marker = "slurm.ESLURM_BURST_BUFFER_PERMISSION = 2035.0" if version != "22.05" else ""
    script = tmp_path / "run.lua"
    script.write_text(
        HARNESS.replace("dofile(", marker + "\ndofile(")
        % {"lua": json.dumps(str(LUA)), "call": lua_call}
    )
    r = subprocess.run(
        [lua, str(script)],
        capture_output=True,
        text=True,
        timeout=20,
        # the fork itself (the answerer's way: test_burst_buffer_lua_answerer.py)
        env={
            "DAC_BBSTAT": str(fake),
            "DACCTL": "/nonexistent",
            "PATH": "/usr/bin:/bin",
            "DAC_ANSWERER_SOCKET": "none",
        },
    )
    assert r.returncode == 0, r.stderr
    rc, _, out = r.stdout.partition("\n")
    assert out == "shown"
    return (
        int(rc),
        (tmp_path / "argv").read_text().splitlines(),
        (tmp_path / "caller").read_text(),
    )


def test_bbstat_runs_only_dac_bbstat_with_what_the_user_typed(lua, tmp_path):
    assert bbstat(lua, tmp_path, "slurm_bb_get_status()") == (0, [], "")
    assert bbstat(lua, tmp_path, "slurm_bb_get_status('42')") == (0, ["42"], "")


def test_bbstat_on_22_05_never_takes_typed_numbers_for_the_caller(lua, tmp_path):
    # 22.05 passes only the user's words: `scontrol show bbstat 0 0 42` claims nothing
    assert bbstat(lua, tmp_path, "slurm_bb_get_status('0', '0', '42')") == (
        0,
        ["0", "0", "42"],
        "",
    )


def test_bbstat_on_23_02_hands_on_the_caller_slurm_names(lua, tmp_path):
    assert bbstat(lua, tmp_path, "slurm_bb_get_status('1234', '4321', '42')", "23.02") == (
        0,
        ["42"],
        "1234:4321",
    )
    assert bbstat(lua, tmp_path, "slurm_bb_get_status('1234', '4321')", "23.02") == (
        0,
        [],
        "1234:4321",
    )


def test_bbstat_never_reaches_dacctl_whatever_is_typed(lua, tmp_path):
    for words in (
        "'drain', 'dac-server-1'",
        "'--function', 'paths', '--token', '1'",
        "'local', 'down'",
    ):
        rc, argv, _ = bbstat(lua, tmp_path, f"slurm_bb_get_status({words})")
        assert rc == 0 and argv[0] in ("drain", "--function", "local")  # dac-bbstat refuses


def test_paths_passes_a_job_array_tasks_array_from_23_02(lua, tmp_path):
    base = ["--function", "paths", "--token", "12", "--job", "/s/script", "--pathfile", "/s/p"]
    for job_info, more in (
        ("{array_job_id = 9}", ["--array-job", "9"]),
        # lua_pushnumber's (Slurm before 23.11 pushes job fields so): a float on 5.3+, which
        # Lua prints as 9.0; dacctl gets 9
        ("{array_job_id = 9.0}", ["--array-job", "9"]),
        ("{array_job_id = 12}", []),  # the array's own record
        ("{array_job_id = 12.0}", []),
        ("{array_job_id = 0}", []),  # not an array
        ("{}", []),
    ):
        _, _, argv = call(
            lua,
            tmp_path,
            f'slurm_bb_paths("12", "/s/script", "/s/p", "1001", "1002", {job_info})',
        )
        assert argv == base + more
    _, _, argv = call(lua, tmp_path, 'slurm_bb_paths("12", "/s/script", "/s/p")')  # 22.05
    assert argv == base


def test_pre_run_passes_the_nodes_slurm_gives_from_23_02(lua, tmp_path):
    _, _, argv = call(lua, tmp_path, 'slurm_bb_pre_run("7", "/s")')  # 22.05: no job_info
    assert argv == ["--function", "pre_run", "--token", "7", "--job", "/s"]
    _, _, argv = call(
        lua,
        tmp_path,
        'slurm_bb_pre_run("7", "/s", "1001", "1001", {nodes = "node[1-2]", oversubscribe = 0})',
    )
    assert argv[-2:] == ["--nodes", "node[1-2]"]


def test_nothing_but_dacctls_stdout_is_the_answer(lua, tmp_path):
    """24.11+: the hook's stdout and stderr together are its answer. dacctl's stderr goes to
    DAC_SLURM_LOG, and the shell's own complaints (a log it cannot open) to nowhere."""
    fake = tmp_path / "dacctl"
    fake.write_text("#!/bin/sh\necho 'line 2: jobdw: nope'\necho noise >&2\nexit 1\n")
    fake.chmod(0o755)
    script = tmp_path / "run.lua"
    script.write_text(HARNESS % {"lua": json.dumps(str(LUA)), "call": 'slurm_bb_job_process("/s")'})
    for log in (tmp_path / "dacctl.log", tmp_path / "no" / "such" / "dir"):
        r = subprocess.run(
            [lua, str(script)],
            capture_output=True,
            text=True,
            timeout=20,
            env={
                "DACCTL": str(fake),
                "PATH": "/usr/bin:/bin",
                "DAC_SLURM_LOG": str(log),
                "DAC_ANSWERER_SOCKET": str(tmp_path / "no-answerer"),
            },
        )
        assert r.stderr == ""
        assert r.stdout.startswith("-1\n")
    assert (tmp_path / "dacctl.log").read_text() == "noise\n"


def _stripped_environment(lua: str, tmp_path: Path, data: bytes) -> None:
    """`data` installed as etc/burst_buffer.lua beside a burst_buffer.env, data_in called
    under `lua` with no environment at all: the file's settings reach dacctl."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "burst_buffer.lua").write_bytes(data)
    fake = tmp_path / "dacctl"
    fake.write_text(
        f'#!/bin/sh\nprintf \'%s\\n\' "$DAC_CONFIG" "$SLURM_CONF" "$@" > {tmp_path}/argv\n'
    )
    fake.chmod(0o755)
    (etc / "burst_buffer.env").write_text(
        f"DACCTL={fake}\nDAC_CONFIG=/etc/dac/x y.yaml\nSLURM_CONF={etc}/slurm.conf\n"
        f"DAC_SLURM_LOG={tmp_path}/log\n"
    )
    script = tmp_path / "run.lua"
    script.write_text(
        HARNESS
        % {"lua": json.dumps(str(etc / "burst_buffer.lua")), "call": 'slurm_bb_data_in("7", "/s")'}
    )
    r = subprocess.run([lua, str(script)], capture_output=True, text=True, timeout=20, env={})
    assert (r.returncode, r.stdout, r.stderr) == (0, "0\n", "")
    assert (tmp_path / "argv").read_text().splitlines() == [
        "/etc/dac/x y.yaml",
        f"{etc}/slurm.conf",
        "--function",
        "data_in",
        "--token",
        "7",
        "--job",
        "/s",
    ]


def test_a_stripped_environment_falls_back_on_burst_buffer_env(lua, tmp_path):
    """Slurm 24.11.0 and 24.11.1 run the hooks with no environment: burst_buffer.env beside
    burst_buffer.lua names dacctl and what dacctl needs."""
    _stripped_environment(lua, tmp_path, LUA.read_bytes())


def test_compiled_to_lua_5_1_bytecode_it_finds_burst_buffer_env_by_its_chunks_name(tmp_path):
    """Compiled (`dacctl slurm-files --lua-bytecode lua5.1`: Lua 5.1's alone, as bytecode
    loads only in the Lua that made it), the script finds burst_buffer.env by the name its
    chunk was given."""
    lua = shutil.which("lua5.1")
    if lua is None:
        missing("lua5.1 is not installed")
    data = lua_bytecode_of(LUA.read_bytes(), f"@{tmp_path}/etc/burst_buffer.lua", "lua5.1")
    assert data.startswith(b"\x1bLua\x51")
    _stripped_environment(lua, tmp_path, data)


def test_the_shipped_burst_buffer_env_is_read_for_its_values(lua, tmp_path):
    """The sample a site copies: its comments are skipped, its values taken (dacctl's path
    pointed at a stand-in here)."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "burst_buffer.lua").write_text(LUA.read_text())
    fake = tmp_path / "dacctl"
    fake.write_text(f'#!/bin/sh\nprintf \'%s\\n\' "$DAC_CONFIG" "$SLURM_CONF" > {tmp_path}/env\n')
    fake.chmod(0o755)
    sample = asset("slurm", "burst_buffer.env").read_text()
    assert "DACCTL=/usr/local/bin/dacctl\n" in sample
    (etc / "burst_buffer.env").write_text(sample.replace("/usr/local/bin/dacctl", str(fake)))
    script = tmp_path / "run.lua"
    script.write_text(
        HARNESS
        % {"lua": json.dumps(str(etc / "burst_buffer.lua")), "call": 'slurm_bb_pre_run("7", "/s")'}
    )
    r = subprocess.run([lua, str(script)], capture_output=True, text=True, timeout=20, env={})
    assert (r.stdout, r.stderr) == ("0\n", "")
    assert (tmp_path / "env").read_text() == "/etc/dac/dac.yaml\n/etc/slurm/slurm.conf\n"
