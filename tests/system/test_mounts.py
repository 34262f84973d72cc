"""Compute-node mounts, swap and persistent buffers, driven through the Slurm functions by
real dacd processes: real bind mounts under each fake node's root, real swap files, files
written as the job's user."""

import os
import subprocess

import pytest
from clitools import pools, run, setup, slurm
from mounts import mounts, swaps

from daccore.records.models import State

UID, GID = 1234, 4321


def as_user(*argv, uid=UID, gid=GID):
    return subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *argv],
        capture_output=True,
        text=True,
    )


def node_file(tmp_path, *nodes):
    f = tmp_path / "nodes"
    f.write_text("".join(n + "\n" for n in nodes))
    return str(f)


def create_persistent(env, name):
    return run(
        "dacctl",
        "--function",
        "create_persistent",
        "-c",
        "CLI",
        "-t",
        name,
        "-u",
        str(UID),
        "-g",
        str(GID),
        "-C",
        "default:512MiB",
        env=env,
    ).stdout


def under(path):
    return sorted(m for m in mounts() if m.startswith(str(path) + "/"))


def test_pre_run_mounts_the_job_on_each_node_and_post_run_unmounts(dac, tmp_path):
    workdir, env, store = dac
    script = setup(env, tmp_path, 7, "512MiB", "#DW swap 32MiB")
    nodes = workdir / "nodes"
    slurm(
        env,
        "pre_run",
        7,
        "--job",
        str(script),
        "--nodehostnamefile",
        node_file(tmp_path, "node1", "node2"),
    )
    host = store.buffer("7").record.allocation.primary_host
    fs = workdir / "fs" / host / "7" / "mnt"
    assert under(nodes) == [
        f"{nodes}/node{n}/7/{kind}" for n in (1, 2) for kind in ("private", "striped")
    ]
    for n in (1, 2):
        for kind in ("striped", "private"):
            st = os.stat(nodes / f"node{n}" / "7" / kind)
            assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (UID, GID, 0o700)
    # the user writes on node1 and reads on node2 through the shared striped directory
    assert (
        as_user(
            "sh", "-c", 'echo hello > "$1"', "sh", str(nodes / "node1" / "7" / "striped" / "f")
        ).returncode
        == 0
    )
    assert (nodes / "node2" / "7" / "striped" / "f").read_text() == "hello\n"
    # private directories are the node's own
    assert as_user("touch", str(nodes / "node1" / "7" / "private" / "mine")).returncode == 0
    assert not (nodes / "node2" / "7" / "private" / "mine").exists()
    assert (fs / "private" / "node1" / "mine").exists()
    # nobody else gets in
    assert as_user("ls", str(nodes / "node1" / "7" / "striped"), uid=4242).returncode != 0
    assert sorted(s for s in swaps() if s.startswith(str(fs))) == [
        f"{fs}/swap/node1",
        f"{fs}/swap/node2",
    ]
    (status,) = store.statuses("7").values()
    assert status.state is State.MOUNTED and status.attached == {"7": ["node1", "node2"]}

    slurm(env, "post_run", 7, "--job", str(script))
    assert under(nodes) == [] and not [s for s in swaps() if s.startswith(str(fs))]
    assert sorted(os.listdir(nodes / "node1")) == []  # nothing left behind on the nodes
    assert (fs / "striped" / "f").read_text() == "hello\n"  # the data stays for stage-out
    slurm(env, "teardown", 7, "--job", str(script))
    assert store.buffer("7") is None and pools(env)["default"]["free_bricks"] == 4


def test_paths_name_the_mounts_jobs_see(dac, tmp_path):
    workdir, env, store = dac
    create_persistent(env, "pbuf")
    script = setup(env, tmp_path, 3, "512MiB", "#DW persistentdw name=pbuf")
    paths = tmp_path / "paths"
    slurm(env, "paths", 3, "--job", str(script), "--pathfile", str(paths))
    mnt = workdir / "mnt"
    assert paths.read_text().splitlines() == [
        f"DW_JOB_STRIPED={mnt}/3/striped",
        f"DW_JOB_PRIVATE={mnt}/3/private",
        f"DW_PERSISTENT_STRIPED_pbuf={mnt}/3/persistent/pbuf",
    ]


def test_a_persistent_buffer_is_attached_by_jobs_and_destroyed_only_when_free(dac, tmp_path):
    workdir, env, store = dac
    assert create_persistent(env, "pbuf") == "created pbuf\n"
    host = store.buffer("pbuf").record.allocation.primary_host
    job = tmp_path / "job.sh"
    job.write_text("#!/bin/sh\n#DW persistentdw name=pbuf\n")
    nodes = workdir / "nodes"
    # two jobs attach it, one of them on the same node as the other
    slurm(env, "pre_run", 11, "--job", str(job), "--nodehostnamefile", node_file(tmp_path, "node1"))
    slurm(
        env,
        "pre_run",
        12,
        "--job",
        str(job),
        "--nodehostnamefile",
        node_file(tmp_path, "node1", "node2"),
    )
    assert under(nodes) == [
        f"{nodes}/node1/11/persistent/pbuf",
        f"{nodes}/node1/12/persistent/pbuf",
        f"{nodes}/node2/12/persistent/pbuf",
    ]
    assert (
        as_user("touch", str(nodes / "node1" / "11" / "persistent" / "pbuf" / "x")).returncode == 0
    )
    assert (nodes / "node2" / "12" / "persistent" / "pbuf" / "x").exists()

    r = slurm(env, "teardown", "pbuf", "--job", str(job), check=False)
    assert (r.returncode, r.stdout) == (
        1,
        "destroy_persistent: buffer 'pbuf' is attached to job 11, 12; destroy it once they end\n",
    )
    slurm(env, "post_run", 11, "--job", str(job))
    assert under(nodes) == [
        f"{nodes}/node1/12/persistent/pbuf",
        f"{nodes}/node2/12/persistent/pbuf",
    ]
    slurm(env, "teardown", 11, "--job", str(job))  # a job without a jobdw: nothing to delete
    slurm(env, "teardown", 12, "--job", str(job))  # no post_run came: teardown detaches
    assert under(nodes) == []
    # another user's job may not attach it
    other = tmp_path / "other.sh"
    other.write_text(
        "#!/bin/sh\n#DW jobdw capacity=512MiB pool=default\n#DW persistentdw name=pbuf\n"
    )
    r = run(
        "dacctl",
        "--function",
        "setup",
        "--token",
        "13",
        "--caller",
        "SLURM",
        "--user",
        "4242",
        "--groupid",
        "4242",
        "--job",
        str(other),
        env=env,
        check=False,
    )
    assert (r.returncode, r.stdout) == (
        1,
        "line 3: persistentdw: persistent buffer 'pbuf' belongs to another user\n",
    )
    assert (workdir / "fs" / host / "pbuf" / "mnt" / "striped" / "x").exists()  # data outlived jobs
    slurm(env, "teardown", "pbuf", "--job", str(job))
    assert store.buffer("pbuf") is None and pools(env)["default"]["free_bricks"] == 4


def test_a_job_whose_destroy_persistent_slurm_did_not_carry_out_is_held_in_one_line(dac, tmp_path):
    """Issue 45: Slurm carries out destroy_persistent lines (burst_buffer/datawarp a `#BB` one,
    as `teardown --token <name>` before stage-in, asking again while the buffer is attached);
    burst_buffer/lua none. A job whose line's buffer still exists at setup used to run and end
    well, the buffer kept and nothing said: setup refuses it, and Slurm holds the job."""
    workdir, env, store = dac
    create_persistent(env, "pbuf")
    attach = tmp_path / "attach.sh"
    attach.write_text("#!/bin/sh\n#DW persistentdw name=pbuf\n")
    slurm(env, "pre_run", 11, "--job", str(attach), "--nodehostnamefile", node_file(tmp_path, "n1"))
    destroy = tmp_path / "destroy.sh"
    destroy.write_text("#!/bin/sh\n#DW destroy_persistent name=pbuf\n")
    assert slurm(env, "job_process", 12, "--job", str(destroy)).stdout == ""  # lua lets it by

    def setup_12(uid=UID, gid=GID):
        who = ("--caller", "SLURM", "--user", str(uid), "--groupid", str(gid))
        return slurm(env, "setup", 12, *who, "--job", str(destroy), check=False)

    held = "line 2: destroy_persistent: persistent buffer 'pbuf' still exists: "
    how = " (dacctl destroy-persistent pbuf) and release the job (scontrol release 12)\n"
    r = setup_12()
    assert (r.returncode, r.stdout, r.stderr) == (
        1,
        held + "it is attached to job 11; once no job uses it, destroy it" + how,
        "",
    )
    slurm(env, "post_run", 11, "--job", str(attach))
    slurm(env, "teardown", 11, "--job", str(attach))
    r = setup_12()
    assert (r.returncode, r.stdout) == (
        1,
        held + "Slurm did not destroy it (burst_buffer/lua never does): destroy it" + how,
    )
    assert store.buffer("pbuf") is not None
    # another user's job is refused as before, told nothing of the buffer's jobs
    r = setup_12(4242, 4242)
    assert (r.returncode, r.stdout) == (
        1,
        "line 2: destroy_persistent: buffer 'pbuf' belongs to another user\n",
    )
    # destroyed as burst_buffer/datawarp does before stage-in: the job goes on
    slurm(env, "teardown", "pbuf", "--job", str(destroy))
    assert setup_12().returncode == 0 and store.buffer("pbuf") is None


def test_a_job_whose_create_persistent_slurm_did_not_carry_out_is_held_in_one_line(dac, tmp_path):
    """The same for create_persistent (issue 45): burst_buffer/datawarp makes the buffer
    before setup, burst_buffer/lua never does; a job whose line's buffer does not exist at
    setup is refused there in one line, and Slurm holds it, rather than run without it."""
    workdir, env, store = dac
    create = tmp_path / "create.sh"
    create.write_text("#!/bin/sh\n#DW create_persistent name=pnew capacity=512MiB\n")
    assert slurm(env, "job_process", 13, "--job", str(create)).stdout == ""
    who = ("--caller", "SLURM", "--user", str(UID), "--groupid", str(GID))
    r = slurm(env, "setup", 13, *who, "--job", str(create), check=False)
    assert (r.returncode, r.stdout, r.stderr) == (
        1,
        "line 2: create_persistent: persistent buffer 'pnew' does not exist: Slurm did not "
        "create it (burst_buffer/lua never does): create it (dacctl create-persistent --name "
        "pnew --capacity SIZE) and release the job (scontrol release 13)\n",
        "",
    )
    # made as burst_buffer/datawarp does before setup: the job goes on
    create_persistent(env, "pnew")
    assert slurm(env, "setup", 13, *who, "--job", str(create), check=False).returncode == 0


@pytest.mark.parametrize(
    "lines,message",
    [
        (
            ["#DW swap 600MiB"],
            "line 3: swap: 600MiB per node is more than the buffer's capacity 512MiB",
        ),
    ],
)
def test_job_process_refuses_swap_that_cannot_fit(dac, tmp_path, lines, message):
    _, env, _ = dac
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/sh\n#DW jobdw capacity=512MiB pool=default\n"
        + "".join(line + "\n" for line in lines)
    )
    r = run("dacctl", "--function", "job_process", "--job", str(script), env=env, check=False)
    assert (r.returncode, r.stdout) == (1, message + "\n")


def test_pre_run_refuses_more_swap_than_the_buffer_holds_for_all_nodes(dac, tmp_path):
    workdir, env, store = dac
    script = setup(env, tmp_path, 4, "512MiB", "#DW swap 200MiB")
    r = slurm(
        env,
        "pre_run",
        4,
        "--job",
        str(script),
        "--nodehostnamefile",
        node_file(tmp_path, "node1", "node2", "node3"),
        check=False,
    )
    assert (r.returncode, r.stdout) == (
        1,
        "swap: 3 nodes x 200MiB of swap is more than the buffer holds (512MiB)\n",
    )
    slurm(env, "teardown", 4, "--job", str(script))
    assert under(workdir / "nodes") == [] and store.buffer("4") is None
