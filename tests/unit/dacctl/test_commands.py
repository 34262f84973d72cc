"""dacctl's one command table and its one parser (dacctl/commands.py)."""

import inspect
import json
import os
import subprocess
import sys

import pytest

from dacctl import commands
from dacctl.commands import ADMIN, ANYONE, COMMANDS, ROOT, SLURM, Usage, parse
from dacctl.main import main

FUNCTIONS = [c.name.split()[1] for c in COMMANDS if c.name.startswith("function ")]
#: what Slurm's burst_buffer/datawarp and burst_buffer.lua pass, one call of each function
SLURM_ARGV = {
    "pools": [],
    "show_instances": [],
    "show_sessions": [],
    "show_configurations": [],
    "job_process": ["--job", "/s/job.sh", "--user", "1000"],
    "setup": [
        *("--token", "7", "--caller", "SLURM", "--user", "1000", "--groupid", "1000"),
        *("--capacity", "default:1GiB", "--job", "/s/job.sh"),
    ],
    "real_size": ["--token", "7"],
    "data_in": ["--token", "7", "--job", "/s/job.sh"],
    "paths": ["--token", "7", "--job", "/s/job.sh", "--pathfile", "/s/path", "--array-job", "6"],
    "pre_run": ["--token", "7", "--job", "/s/job.sh", "--nodehostnamefile", "/s/nids"],
    "post_run": ["--token", "7", "--job", "/s/job.sh"],
    "data_out": ["--token", "7", "--job", "/s/job.sh"],
    "teardown": ["--token", "7", "--job", "/s/job.sh", "--hurry"],
    "create_persistent": [
        *("-c", "CLI", "-t", "proj1", "-u", "1000", "-C", "default:1GiB", "-a", "striped"),
        *("-T", "scratch"),
    ],
}


def test_every_command_has_a_one_line_summary_a_who_and_a_handler_that_imports():
    assert len({c.name for c in COMMANDS}) == len(COMMANDS)
    for c in COMMANDS:
        assert c.summary and "\n" not in c.summary and c.summary.endswith("."), c.name
        assert c.who in (ANYONE, ADMIN, ROOT, SLURM), c.name
        if c.handler is None:  # a group: its commands follow
            assert commands.members(c.name), c.name
            continue
        handler = c.load()
        assert callable(handler), c.handler
        params = list(inspect.signature(handler).parameters)
        if c.who == SLURM:
            assert params == ["call", "settings", "store"], c.name
        else:  # people's: exactly the table's arguments, by name
            assert params == [a.dest for a in c.args], c.name


def test_every_command_has_its_help(capsys):
    for c in COMMANDS:
        assert main([*c.name.split(), "--help"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: dacctl {c.name}"), c.name
        assert c.summary in " ".join(out.split()), c.name  # wrapped to the terminal
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {c.name} " in out for c in commands.members(""))


def test_slurms_function_list_is_the_protocols():
    assert sorted(FUNCTIONS) == sorted(SLURM_ARGV)
    assert all(commands.command(f"function {f}").who == SLURM for f in FUNCTIONS)


@pytest.mark.parametrize("function", sorted(SLURM_ARGV))
def test_the_dw_wlm_cli_form_and_the_command_form_reach_the_same_handler(function):
    argv = SLURM_ARGV[function]
    cray, cray_args = parse(["--function", function, *argv])
    command, command_args = parse(["function", function, *argv])
    assert cray is command is commands.command(f"function {function}")
    assert vars(cray_args) == vars(command_args)
    assert cray_args.function == function and cray.load() is command.load()


def test_the_dw_wlm_cli_form_keeps_its_spellings():
    assert parse(["--function=pools"])[1].function == "pools"
    assert parse(["--fun", "show_sessions"])[1].function == "show_sessions"
    _, args = parse(["--debug", "--function", "teardown", "-t", "proj1", "--hu"])
    assert (args.token, args.hurry, args.debug) == ("proj1", True, True)
    _, args = parse(["--function", "setup", "--group", "1000", "-u", "1001"])
    assert (args.groupid, args.user) == (1000, 1001)


@pytest.mark.parametrize(
    "argv",
    [
        ["--function"],
        ["--function", "bogus"],
        ["--function", ""],
        ["function"],
        ["--function", "setup", "--user", "x"],
        ["--function", "pools", "--bogus"],
        ["--function=setup", "--token", "7"],
    ],
)
def test_a_refused_slurm_line_is_answered_by_slurms_protocol_after_the_caller_check(
    argv, monkeypatch, capsys
):
    from daccore.services import slurm_answer
    from daccore.services.slurm_args import Refused

    with pytest.raises(Usage) as e:
        parse(argv)
    assert e.value.command is not None and e.value.command.who == SLURM

    def refuse():
        raise Refused("dacctl --function is for Slurm only (root or SlurmUser 'slurm')")

    monkeypatch.setattr(slurm_answer, "settings_for_caller", refuse)
    assert main(argv) == 1
    out = capsys.readouterr()
    assert out.out.startswith("dacctl --function is for Slurm only") and out.err == ""
    monkeypatch.setattr(slurm_answer, "settings_for_caller", lambda: {})
    assert main(argv) == 1
    out = capsys.readouterr()
    assert out.out.startswith("dacctl: ") and out.out.count("\n") == 1 and out.err == ""


@pytest.mark.parametrize(
    "argv,says",
    [
        ([], "dacctl: usage error: a command is required (see dacctl --help)"),
        (["bogus"], "dacctl: usage error: no such command 'bogus' (choose from pools, "),
        (["status"], "dacctl status: usage error: the following arguments are required: BUFFER"),
        (["pools", "--js"], "dacctl pools: usage error: unrecognized arguments: --js"),
        (["local"], "dacctl local: usage error: a command is required"),
        (
            ["local", "up", "--brick-size", "0x"],
            "dacctl local up: usage error: argument --brick-size: '0x' has an unknown unit",
        ),
        (["local", "up", "--servers", "65"], "argument --servers: 65 is not in the range 1 to 64"),
        (["buffers", "--state", "x"], "argument --state: invalid choice: 'x' (choose from 'new'"),
        (
            ["estimate", "/"],
            "dacctl estimate: usage error: argument SCRIPT: file '/' is a directory",
        ),
        (["create-persistent", "--name", "p", "--capacity", "0"], "'0' must be greater than zero"),
        (["status", "7", "--function", "pools"], "unrecognized arguments: --function pools"),
    ],
)
def test_a_peoples_usage_error_is_one_line_on_stderr_exit_2(argv, says, capsys):
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and says in out.err, out.err


def test_version_and_debug_anywhere(capsys):
    import daccore

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"dac, version {daccore.__version__}\n"
    _, args = parse(["status", "7", "--debug"])
    assert args.debug and args.buffer == "7"


def test_a_root_command_refuses_anyone_else_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert main(["local", "status", "--workdir", "/nonexistent"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "dacctl: user error: dacctl local status is for root only: it runs etcd, dacd and loop "
        "devices as root\n"
    )


def test_a_peoples_handler_gets_its_arguments_converted(monkeypatch):
    got = {}
    monkeypatch.setattr("dacctl.cli.create_persistent", lambda **kw: got.update(kw))
    assert main(["create-persistent", "--name", "p1", "--capacity", "1.5GiB", "--user", "7"]) == 0
    assert got == {
        "name": "p1",
        "capacity": 3 << 29,
        "pool": None,
        "access": "striped",
        "type_": "scratch",
        "owner_uid": 7,
        "owner_gid": None,
    }


def test_a_hook_imports_neither_click_nor_any_handler_but_its_own():
    # every Slurm function parsed and its handler loaded, as `dacctl --function` does
    code = (
        "import sys, json; from dacctl.commands import parse; from dacctl import datawarp; "
        f"argvs = {json.dumps(SLURM_ARGV)}; "
        "[parse(['--function', f, *a])[0].load() for f, a in argvs.items()]; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(r.stdout))
    heavy = {"click", "rich", "pydantic", "yaml", "grpc", "dacctl.cli", "daccore.settings.config"}
    assert not {m for m in loaded if m in heavy or m.split(".")[0] in heavy}
    assert "dacctl.commands" in loaded


def test_the_hooks_import_what_they_did_and_the_table(tmp_path):
    # `-X importtime` of dacctl --function job_process up to its first etcd read: the parse,
    # the caller check and the script read add dacctl.commands and nothing else
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#DW jobdw capacity=1GiB access_mode=striped pool=default\n")
    cfg = tmp_path / "dac.yaml"
    cfg.write_text(
        f"etcd: {{endpoints: ['127.0.0.1:1'], timeout: 1, credentials_dir: {tmp_path}}}\n"
    )
    (tmp_path / "slurm").write_text("slurm:secret\n")
    env = {"DAC_CONFIG": str(cfg), "DAC_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/bin"}
    argv = ["-m", "dacctl.main", "--function", "job_process", "--job", str(script)]
    for _ in range(2):  # the first call validates the config and caches it (pydantic)
        r = subprocess.run(
            [sys.executable, "-X", "importtime", *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
    assert r.returncode == 1 and r.stdout.startswith("etcd unreachable"), r.stdout + r.stderr
    loaded = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines()[1:]}
    assert "dacctl.commands" in loaded and "argparse" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("click", "rich", "pydantic", "yaml")}


def test_the_admin_docs_say_who_may_run_each_command_as_the_table_does():
    from pathlib import Path

    # the checkout's docs: scripts/test-installed runs a copy of tests/ beside the installed
    # wheel and names the checkout in DAC_CHECKOUT
    root = Path(os.environ.get("DAC_CHECKOUT") or Path(__file__).parents[3])
    doc = (root / "docs" / "admin-cli.md").read_text()
    said = {}
    for row in doc.split("| command | who may run it |", 1)[1].split("\n\n", 1)[0].splitlines():
        cells = [c.strip() for c in row.strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`dacctl"):
            continue
        group: list[str] = []  # `dacctl local up` / `status`: the second is `local status`
        for spelled in cells[0].split("`")[1::2]:
            words = [w for w in spelled.split() if w != "dacctl" and not w.startswith("<")]
            if words[0].startswith("--"):
                continue  # the dw_wlm_cli spelling of the row's command
            if spelled.startswith("dacctl"):
                group = words[:-1]
            else:
                words = [*group, *words]
            said[" ".join(words)] = cells[1]
    assert len(said) >= 18  # every row read
    for name, who in said.items():
        assert who.startswith(commands.command(name).who), (name, who)
