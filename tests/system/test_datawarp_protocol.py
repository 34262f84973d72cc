"""`dacctl --function …` as Slurm's burst_buffer/datawarp (and our burst_buffer.lua) call it."""

import json
import os
import sys

import pytest
from clitools import run

MiB = 1 << 20

GOOD = """#!/bin/bash
#SBATCH -N 2
#DW jobdw capacity=600MiB access_mode=striped,private type=scratch
#DW stage_in type=directory source=/home/u/in destination=$DW_JOB_STRIPED/in
#DW stage_out type=directory source=$DW_JOB_STRIPED/out destination=/home/u/out
srun hostname
"""


def fn(env, *args):
    return run("dacctl", "--function", *args, env=env, check=False)


@pytest.fixture
def job(tmp_path):
    def write(text, name="job.sh"):
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write


def test_pools_in_datawarp_units(local_dac):
    _, env = local_dac
    r = fn(env, "pools")
    assert r.returncode == 0
    assert json.loads(r.stdout) == {
        "pools": [
            {"id": "default", "units": "bytes", "granularity": 512 * MiB, "quantity": 8, "free": 8}
        ]
    }


def test_a_job_from_setup_to_teardown(local_dac, open_dir, job, tmp_path):
    workdir, env = local_dac
    home = open_dir / "home"
    (home / "in").mkdir(parents=True)
    (home / "in" / "data").write_text("42\n")
    for path in (home, home / "in", home / "in" / "data"):
        os.chown(path, 1000, 1000)
    # no job runs between the stages here: stage out what came in
    script = job(
        GOOD.replace("/home/u", str(home)).replace("$DW_JOB_STRIPED/out", "$DW_JOB_STRIPED/in")
    )
    assert fn(env, "job_process", "--job", script).returncode == 0
    r = fn(
        env,
        "setup",
        "--token",
        "42",
        "--caller",
        "SLURM",
        "--user",
        "1000",
        "--groupid",
        "1000",
        "--capacity",
        "default:600MiB",
        "--job",
        script,
    )
    assert (r.returncode, r.stdout) == (0, "")  # returns once dacd has built the filesystem
    # 600 MiB rounds up to two 512 MiB bricks
    assert json.loads(fn(env, "real_size", "--token", "42").stdout) == {
        "token": "42",
        "capacity": 1024 * MiB,
        "units": "bytes",
    }
    assert json.loads(fn(env, "pools").stdout)["pools"][0]["free"] == 6
    pathfile = tmp_path / "paths"
    assert (
        fn(env, "paths", "--token", "42", "--job", script, "--pathfile", str(pathfile)).returncode
        == 0
    )
    assert pathfile.read_text() == (
        f"DW_JOB_STRIPED={workdir}/mnt/42/striped\nDW_JOB_PRIVATE={workdir}/mnt/42/private\n"
    )
    sessions = json.loads(fn(env, "show_sessions").stdout)["sessions"]
    assert [(s["id"], s["owner"]) for s in sessions] == [("42", 1000)]
    # setup again (slurmctld restarted mid-stage-in): the same buffer, not a second one
    fn(
        env,
        "setup",
        "--token",
        "42",
        "--caller",
        "SLURM",
        "--user",
        "1000",
        "--groupid",
        "1000",
        "--capacity",
        "default:600MiB",
        "--job",
        script,
    )
    assert len(json.loads(fn(env, "show_instances").stdout)["instances"]) == 1
    nodes = tmp_path / "nodes"
    nodes.write_text("node1\nnode2\n")
    for f in ("data_in", "pre_run", "post_run", "data_out", "teardown"):
        r = fn(env, f, "--token", "42", "--job", script, "--nodehostnamefile", str(nodes))
        assert (r.returncode, r.stdout) == (0, ""), f
    assert (home / "out" / "data").read_text() == "42\n"  # staged in, then out, as uid 1000
    assert (home / "out").stat().st_uid == 1000
    # teardown returned once dacd had deleted the filesystem and released the bricks
    assert json.loads(fn(env, "show_instances").stdout)["instances"] == []
    assert json.loads(fn(env, "pools").stdout)["pools"][0]["free"] == 8


@pytest.mark.parametrize(
    "line,message",
    [
        ("#DW jobdw capacity=0", "line 2: jobdw: capacity '0' must be greater than zero"),
        (
            "#DW jobdw capacity=1TiB",
            "line 2: jobdw: capacity 1TiB is more than pool 'default' holds (4GiB)",
        ),
        (
            "#DW jobdw capacity=1GiB pool=fast",
            "line 2: jobdw: unknown pool 'fast' (pools: default)",
        ),
        (
            "#DW stage_in type=file source=/a destination=$DW_JOB_STRIPED/a",
            "line 2: stage_in: the job has no buffer for $DW_JOB_STRIPED (add a #DW jobdw line)",
        ),
    ],
)
def test_job_process_refuses_with_one_line_on_stdout(local_dac, job, line, message):
    _, env = local_dac
    r = fn(env, "job_process", "--job", job(f"#!/bin/sh\n{line}\n"))
    assert r.returncode == 1
    assert r.stdout == message + "\n"
    assert "Traceback" not in r.stderr


def test_persistent_buffers_are_created_attached_and_owned(local_dac, job):
    _, env = local_dac
    attach = job("#!/bin/sh\n#DW persistentdw name=proj1\n")
    # not made yet: accepted, for setup to wait (burst_buffer/datawarp holds the job first)
    r = fn(env, "job_process", "--job", attach, "--user", "1000")
    assert (r.returncode, r.stdout) == (0, "")
    r = fn(
        env,
        "create_persistent",
        "-c",
        "CLI",
        "-t",
        "proj1",
        "-u",
        "1000",
        "-C",
        "default:512MiB",
        "-a",
        "striped",
        "-T",
        "scratch",
    )
    assert (r.returncode, r.stdout) == (0, "created proj1\n")
    assert fn(env, "job_process", "--job", attach, "--user", "1000").returncode == 0
    r = fn(env, "job_process", "--job", attach, "--user", "1001")
    assert (r.returncode, r.stdout) == (
        1,
        "line 2: persistentdw: persistent buffer 'proj1' belongs to another user\n",
    )
    again = job("#!/bin/sh\n#BB create_persistent name=proj1 capacity=512MiB\n", "again.sh")
    assert fn(env, "job_process", "--job", again).stdout == (
        "line 2: create_persistent: a buffer named 'proj1' already exists\n"
    )
    r = fn(
        env, "create_persistent", "-c", "CLI", "-t", "9lives", "-u", "1000", "-C", "default:512MiB"
    )
    assert r.returncode == 1 and "name '9lives' must start with a letter" in r.stdout
    r = fn(
        env,
        "create_persistent",
        "-c",
        "CLI",
        "-t",
        "proj2",
        "-u",
        "1000",
        "-C",
        "default:512MiB",
        "-a",
        "private",
    )
    assert (r.returncode, r.stdout) == (
        1,
        "create_persistent: access 'private': persistent "
        "buffers are striped (every attaching job sees one "
        "directory)\n",
    )
    r = fn(
        env,
        "create_persistent",
        "-c",
        "CLI",
        "-t",
        "proj2",
        "-u",
        "1000",
        "-C",
        "default:512MiB",
        "-T",
        "cache",
    )
    assert (r.returncode, r.stdout) == (1, "create_persistent: type 'cache' must be scratch\n")


def test_usage_errors_and_an_unreachable_etcd_are_one_line_exit_1(local_dac, tmp_path):
    _, env = local_dac
    r = fn(env, "setup", "--token", "43")
    assert (r.returncode, r.stdout) == (
        1,
        "dacctl: --function setup needs --user --groupid --job\n",
    )
    r = fn(env, "job_process", "--job", str(tmp_path / "missing.sh"))
    assert r.returncode == 1 and r.stdout.startswith("cannot read the job script")
    cfg = tmp_path / "dac.yaml"
    (tmp_path / "slurm").write_text("slurm:secret\n")  # a credential, so etcd is the fault
    cfg.write_text(
        f"etcd: {{endpoints: ['127.0.0.1:1'], timeout: 1, credentials_dir: {tmp_path}}}\n"
    )
    r = fn({"DAC_CONFIG": str(cfg), "DAC_ETCD_ENDPOINTS": ""}, "pools")
    assert r.returncode == 1 and r.stdout.startswith("etcd unreachable at http://127.0.0.1:1")
    assert r.stdout.count("\n") == 1 and "Traceback" not in r.stderr


def test_setup_refuses_a_capacity_slurm_accounts_otherwise_naming_both(local_dac, job):
    _, env = local_dac
    script = job(GOOD)  # capacity=600MiB, no pool=: the only pool, default
    owner = ("--caller", "SLURM", "--user", "1000", "--groupid", "1000", "--job", script)
    for capacity, why in (
        ("default:512MiB", "Slurm accounts less than dac would allocate"),
        (
            "fast:1GiB",
            "a different pool: burst_buffer.conf's DefaultPool and dac.yaml's default_pool "
            "must name the same one",
        ),
    ):
        r = fn(env, "setup", "--token", "44", *owner, "--capacity", capacity)
        assert (r.returncode, r.stdout) == (
            1,
            f"setup: Slurm's --capacity {capacity} disagrees with the script's jobdw (line 3: "
            f"600MiB in pool 'default'): {why}\n",
        )
    r = fn(env, "setup", "--token", "44", *owner, "--capacity", "default")
    assert (r.returncode, r.stdout) == (
        1,
        "--capacity 'default': not POOL:SIZE, as Slurm passes it\n",
    )
    assert json.loads(fn(env, "show_instances").stdout)["instances"] == []
    # what Slurm passes when it agrees: rounded up to the bricks (lua), in bb_get_size_str's
    # units (datawarp); the command form is the same function
    r = run(
        "dacctl",
        "function",
        "setup",
        "--token",
        "44",
        *owner,
        "--capacity",
        f"default:{1024 * MiB}",
        env=env,
        check=False,
    )
    assert (r.returncode, r.stdout) == (0, "")
    assert fn(env, "teardown", "--token", "44", "--job", script, "--hurry").returncode == 0
    assert json.loads(fn(env, "pools").stdout)["pools"][0]["free"] == 8


def test_data_in_and_out_with_nothing_to_stage_take_the_lean_path(local_dac, job, tmp_path):
    """No stage lines: data_in/data_out answer without pydantic or waiting for dacd, and the
    buffer still walks through its (empty) stage steps to mounted and back to deleted."""
    _, env = local_dac
    script = job("#!/bin/sh\n#DW jobdw capacity=512MiB access_mode=striped\n")
    assert (
        fn(
            env,
            "setup",
            "--token",
            "61",
            "--caller",
            "SLURM",
            "--user",
            "1000",
            "--groupid",
            "1000",
            "--job",
            script,
        ).returncode
        == 0
    )
    for f in ("data_in", "data_out"):
        r = run(
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "dacctl.main",
            "--function",
            f,
            "--token",
            "61",
            "--job",
            script,
            env=env,
            check=False,
        )
        assert r.returncode == 0 and r.stdout == ""
        imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines()}
        assert "pydantic" not in imported and "daccore.records.models" not in imported, f
    nodes = tmp_path / "nodes"
    nodes.write_text("node1\n")
    for f in ("pre_run", "post_run", "teardown"):
        r = fn(env, f, "--token", "61", "--job", script, "--nodehostnamefile", str(nodes))
        assert (r.returncode, r.stdout) == (0, ""), f
    assert json.loads(fn(env, "pools").stdout)["pools"][0]["free"] == 8


HEAVY = ("pydantic", "yaml", "grpc", "aetcd", "google.protobuf", "rich", "click")


def test_the_hooks_inside_slurmctld_load_no_heavy_module(local_dac, job, tmp_path):
    # job_process, pools and paths run inside slurmctld under its locks: their budget
    # (docs/performance.md) holds only while they import none of these
    _, env = local_dac
    script = job(GOOD)
    assert (
        fn(
            env,
            "setup",
            "--token",
            "9",
            "--caller",
            "SLURM",
            "--user",
            "1000",
            "--groupid",
            "1000",
            "--capacity",
            "default:600MiB",
            "--job",
            script,
        ).returncode
        == 0
    )
    import subprocess

    for args in (
        ["job_process", "--job", script],
        ["pools"],
        ["paths", "--token", "9", "--job", script, "--pathfile", str(tmp_path / "p")],
    ):
        r = subprocess.run(
            [
                sys.executable,
                "-X",
                "importtime",
                os.path.join(os.path.dirname(sys.executable), "dacctl"),
                "--function",
                *args,
            ],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        loaded = {
            line.rsplit("|", 1)[-1].strip()
            for line in r.stderr.splitlines()
            if line.startswith("import time:")
        }
        assert "daccore.store" in loaded  # the trace is read
        heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY or m in HEAVY)
        assert heavy == [], f"{args[0]} loads {heavy}"
        # 2.6 ms of a forked call: annotations only, behind `TYPE_CHECKING = False`
        assert "typing" not in loaded, f"{args[0]} loads typing"
    assert fn(env, "teardown", "--token", "9", "--job", script, "--hurry").returncode == 0


def test_a_job_array_tasks_script_slurm_never_wrote_is_the_arrays(local_dac, tmp_path):
    """Slurm 24.11+ hands a split-off task's hooks `hash.<t % 10>/job.<t>/script`, which it
    never wrote (daccore/services/slurm_args.py). paths runs inside slurmctld, so it may not ask
    scontrol for the array: it uses the array burst_buffer.lua names (job_info), and links
    the array's script in where Slurm looks for the task's."""
    _, env = local_dac
    r = fn(
        env, "create_persistent", "-c", "CLI", "-t", "shared", "-u", "1000", "-C", "default:512MiB"
    )
    assert (r.returncode, r.stdout) == (0, "created shared\n")
    state = tmp_path / "state"
    (state / "hash.1" / "job.21").mkdir(parents=True)
    (state / "hash.2").mkdir()
    array = state / "hash.1/job.21/script"
    array.write_text("#!/bin/sh\n#DW persistentdw name=shared\n")
    task, pathfile = state / "hash.2/job.22/script", state / "hash.2/job.22/path"
    args = ("paths", "--token", "22", "--job", str(task), "--pathfile", str(pathfile))
    r = fn(env, *args)  # no array named, and no scontrol inside slurmctld
    assert (r.returncode, r.stdout) == (
        1,
        f"cannot read the job script {task}: No such file or directory\n",
    )
    r = fn(env, *args, "--array-job", "2/1")
    assert (r.returncode, r.stdout) == (
        1,
        "--array-job '2/1': not a job id (Slurm passes decimal job ids)\n",
    )
    r = fn(env, *args, "--array-job", "21")
    assert (r.returncode, r.stdout) == (0, "")
    line = pathfile.read_text()
    assert line.startswith("DW_PERSISTENT_STRIPED_shared=") and line.endswith(
        "/22/persistent/shared\n"
    ), line
    assert (os.stat(task).st_ino, os.stat(task).st_nlink) == (os.stat(array).st_ino, 2)
