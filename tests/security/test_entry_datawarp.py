"""Slurm's entry points under burst_buffer/datawarp, attacked by unprivileged users with a real
Slurm 22.05: `scontrol show bbstat <words>` (GetSysStatus, run as SlurmUser), `dacctl
--function` run by a user directly, and `dacctl local` on a workdir a user wrote. Every attack
is refused and nothing of root's changes (docs/security.md, "Attacks tried")."""

import os
from pathlib import Path

import pytest
from clitools import run
from security.entry_helpers import (
    ALICE,
    MALLORY,
    SECRET,
    Cluster,
    forged_workdir,
    root_sleeper,
    stop,
    victim_file,
)


@pytest.fixture(scope="module")
def dw():
    cluster = Cluster("datawarp")
    try:
        yield cluster
    finally:
        cluster.close()


def test_entry_bbstat_cannot_drain_a_storage_host(dw):
    for words in (
        ["drain", "dac-server-1"],
        ["undrain", "dac-server-2"],
        ["forget", "1"],
        ["--", "drain", "dac-server-1"],
    ):
        r = dw.bbstat(ALICE, *words)
        assert "drained" not in r.stdout, (words, r.stdout)
    assert dw.drained() == []


@pytest.mark.parametrize("existing", [False, True])
def test_entry_bbstat_cannot_make_root_write_a_path_file(dw, existing):
    path = Path("/root/dac-entry-pathfile")
    path.unlink(missing_ok=True)
    if existing:
        victim_file(path.name)
    for token in ("1", "1\nLD_PRELOAD=/tmp/evil.so"):
        r = dw.as_user(
            ALICE,
            "scontrol",
            "--",
            "show",
            "bbstat",
            "--function",
            "paths",
            "--token",
            token,
            "--pathfile",
            str(path),
        )
        assert "LD_PRELOAD" not in r.stdout
    if existing:
        assert path.read_text() == "root's own data\n"
    else:
        assert not path.exists()


def test_entry_bbstat_cannot_run_setup_for_root(dw, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#DW jobdw capacity=512MiB access_mode=striped pool=default\n")
    script.chmod(0o644)
    tmp_path.chmod(0o755)
    r = dw.as_user(
        ALICE,
        "scontrol",
        "--",
        "show",
        "bbstat",
        "--function",
        "setup",
        "--token",
        "990001",
        "--caller",
        "SLURM",
        "--user",
        "0",
        "--groupid",
        "0",
        "--capacity",
        "default:512MiB",
        "--job",
        str(script),
        timeout=90,
    )
    assert r.returncode == 0 or r.stdout  # scontrol ran; what matters is what root did
    assert not dw.buffer_exists("990001")


def test_entry_bbstat_cannot_run_local_down_on_a_forged_state(dw):
    victim, sleeper = victim_file("dac-entry-brick.img"), root_sleeper()
    try:
        workdir = forged_workdir(ALICE, victim, sleeper.pid)
        for verb in ("down", "status", "up"):  # "--": scontrol's own options end there
            dw.bbstat(ALICE, "local", verb, "--workdir", str(workdir))
            dw.as_user(
                ALICE, "scontrol", "--", "show", "bbstat", "local", verb, "--workdir", str(workdir)
            )
        assert victim.read_text() == "root's own data\n"
        assert sleeper.poll() is None, "root's process was killed"
    finally:
        stop(sleeper)


def test_entry_bbstat_shows_no_other_users_paths_or_errors(dw, tmp_path):
    dw.failed_buffer(tmp_path, 990002)
    for words in (
        ["status", "990002", "--line"],
        ["show", "990002"],
        ["status", "990002"],
        ["buffers", "--json"],
        ["990002"],
    ):
        r = dw.bbstat(ALICE, *words)
        assert SECRET not in r.stdout + r.stderr, words
    # what anyone may see: the public line, the failure without its text
    out = dw.bbstat(ALICE, "990002").stdout
    assert out.startswith("buffer 990002: ") and "failed" in out, out
    assert "pool units quantity" in dw.bbstat(ALICE).stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["--function", "pools"],
        ["--function=pools"],
        ["--fun", "show_sessions"],
        ["--function", "paths", "--token", "7", "--pathfile", "/tmp/dac-entry-alice-paths"],
    ],
)
def test_entry_dacctl_function_run_by_a_user_is_refused(dw, argv):
    Path("/tmp/dac-entry-alice-paths").unlink(missing_ok=True)  # an earlier run's, not ours
    r = dw.dacctl(ALICE, *argv)
    assert r.returncode == 1
    assert (
        r.stdout.startswith("dacctl --function is for Slurm only") and r.stdout.count("\n") == 1
    ), r.stdout
    assert "Traceback" not in r.stderr
    assert not os.path.exists("/tmp/dac-entry-alice-paths")


def test_entry_root_never_writes_a_path_file_through_a_users_link(dw, tmp_path):
    victim = victim_file("dac-entry-linked")
    d = tmp_path / "alice"
    d.mkdir()
    os.chown(d, *ALICE)
    tmp_path.chmod(0o755)
    for job_dir in (d, d / "hash.7" / "job.7"):
        job_dir.mkdir(parents=True, exist_ok=True)
        os.chown(job_dir, *ALICE)
        os.symlink(victim, job_dir / "path")
        r = run(
            "dacctl",
            "--function",
            "paths",
            "--token",
            "7",
            "--pathfile",
            str(job_dir / "path"),
            env=dw.env,
            check=False,
        )
        assert r.returncode == 1 and r.stdout.count("\n") == 1, r.stdout
    assert victim.read_text() == "root's own data\n"


@pytest.mark.parametrize(
    "args",
    [
        [
            "--function",
            "setup",
            "--token",
            "990003",
            "--caller",
            "SLURM",
            "--user",
            "0",
            "--groupid",
            "4321",
        ],
        [
            "--function",
            "setup",
            "--token",
            "990003",
            "--caller",
            "SLURM",
            "--user",
            "1234",
            "--groupid",
            "0",
        ],
        [
            "--function",
            "setup",
            "--token",
            "990003\n",
            "--caller",
            "SLURM",
            "--user",
            "1234",
            "--groupid",
            "4321",
        ],
        [
            "--function",
            "setup",
            "--token",
            "../990003",
            "--caller",
            "SLURM",
            "--user",
            "1234",
            "--groupid",
            "4321",
        ],
    ],
)
def test_entry_setup_refuses_root_owners_and_malformed_tokens(dw, tmp_path, args):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#DW jobdw capacity=512MiB access_mode=striped pool=default\n")
    r = run(
        "dacctl",
        *args,
        "--capacity",
        "default:512MiB",
        "--job",
        str(script),
        env=dw.env,
        check=False,
        timeout=90,
    )
    assert r.returncode == 1 and r.stdout.count("\n") == 1, r.stdout
    assert not dw.buffer_exists("990003") and not dw.buffer_exists("990003\n")


def test_entry_local_down_refuses_a_workdir_a_user_wrote(dw):
    victim, sleeper = victim_file("dac-entry-brick2.img"), root_sleeper()
    try:
        workdir = forged_workdir(ALICE, victim, sleeper.pid)
        for verb in ("down", "status"):
            r = run("dacctl", "local", verb, "--workdir", str(workdir), check=False)
            assert r.returncode != 0 and "refused" in r.stderr, r.stderr
            assert len(r.stderr.strip().splitlines()) == 1, r.stderr
            r = dw.dacctl(MALLORY, "local", verb, "--workdir", str(workdir))
            assert r.returncode != 0 and "for root only" in r.stderr, r.stderr
        assert victim.read_text() == "root's own data\n"
        assert sleeper.poll() is None, "root's process was killed"
    finally:
        stop(sleeper)
