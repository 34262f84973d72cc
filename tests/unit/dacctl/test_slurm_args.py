"""daccore/services/slurm_args.py: the checks on every argument Slurm passes to `dacctl
--function`."""

import os

import pytest

from daccore.services import slurm_args as sa
from daccore.services.bbstat import public_line

ROOT = frozenset({0})


@pytest.mark.parametrize("value", ["1", "42", "4294967294"])
def test_a_job_id_is_decimal_and_bounded(value):
    assert sa.job_id(value) == value


@pytest.mark.parametrize(
    "value", ["", "0", "01", "1\n", "1\nX=1", "12345678901", "-1", "1 ", "../1", "٣", "pbuf"]
)
def test_anything_else_is_no_job_id(value):
    with pytest.raises(sa.Refused):
        sa.job_id(value)


def test_a_persistent_name_only_where_slurm_passes_one():
    assert sa.token("pbuf", persistent_ok=True) == "pbuf"
    for bad in ("pbuf\n", "p/../x", "1pbuf"):
        with pytest.raises(sa.Refused):
            sa.token(bad, persistent_ok=True)
    with pytest.raises(sa.Refused):
        sa.token("pbuf", persistent_ok=False)


def test_owner_ids_below_the_minimum_are_refused():
    assert sa.owner_id(1000, "--user", 1000) == 1000
    assert sa.owner_id(0, "--user", 0) == 0  # min_owner_uid 0 lets root own buffers
    for value in (0, 999, -1, 1 << 32):
        with pytest.raises(sa.Refused):
            sa.owner_id(value, "--user", 1000)


def trusted_dir(tmp_path):
    tmp_path.chmod(0o700)  # pytest's tree is root's; its parents are /tmp (sticky) and root's
    return tmp_path


def test_a_path_file_in_a_directory_only_root_can_change_is_written_via_its_fd(tmp_path):
    job = trusted_dir(tmp_path) / "hash.7" / "job.7"
    job.mkdir(parents=True)
    (job / "path").write_text("old\n")
    fd = sa.open_write(str(job / "path"), "the path file", ROOT, "7", ("path",))
    os.write(fd, b"DW_JOB_STRIPED=/mnt/7\n")
    os.close(fd)
    assert (job / "path").read_text() == "DW_JOB_STRIPED=/mnt/7\n"


@pytest.mark.parametrize(
    "make,why",
    [
        (lambda d, victim: os.symlink(victim, d / "path"), "symbolic link"),
        (lambda d, victim: (d / "path").mkdir(), "Is a directory"),
        (lambda d, victim: os.chmod(d, 0o777), "not root's or SlurmUser's alone"),
        (lambda d, victim: os.chown(d, 1234, 4321), "not root's or SlurmUser's alone"),
        (lambda d, victim: os.link(victim, d / "path"), "has 2 names"),
    ],
)
def test_a_path_file_anyone_else_could_have_placed_is_refused(tmp_path, make, why):
    victim = trusted_dir(tmp_path) / "victim"
    victim.write_text("root's\n")
    d = tmp_path / "hash.7" / "job.7"
    d.mkdir(parents=True)
    make(d, victim)
    with pytest.raises(sa.Refused, match=why):
        sa.open_write(str(d / "path"), "the path file", ROOT, "7", ("path",))
    assert victim.read_text() == "root's\n"


def test_a_link_above_the_file_is_refused(tmp_path):
    real = trusted_dir(tmp_path) / "real" / "hash.7" / "job.7"
    real.mkdir(parents=True)
    os.symlink(tmp_path / "real", tmp_path / "link")
    with pytest.raises(sa.Refused, match="symbolic link"):
        sa.open_write(
            str(tmp_path / "link/hash.7/job.7/path"), "the path file", ROOT, "7", ("path",)
        )


@pytest.mark.parametrize("path", ["relative/path", "/a/../b/path", "/a//b", "/a/./b"])
def test_paths_must_be_plain_and_absolute(path):
    with pytest.raises(sa.Refused, match="absolute path"):
        sa.open_write(path, "the path file", ROOT, "7", ("path",))


@pytest.mark.parametrize("path", ["hash.8/job.7/path", "hash.7/job.17/path", "hash.7/job.7/x"])
def test_a_file_in_slurms_layout_must_be_this_jobs(tmp_path, path):
    d = trusted_dir(tmp_path)
    (d / path).parent.mkdir(parents=True)
    with pytest.raises(sa.Refused, match="this job's"):
        sa.open_write(str(d / path), "the path file", ROOT, "7", ("path",))


def _fifo_instead(f):
    f.unlink()
    os.mkfifo(f)


def test_a_job_arrays_script_linked_by_slurm_is_read(tmp_path):
    """Slurm 22.05 hard-links the array's script to each task's job directory (inside its
    own state directory, where no one else can link): the task's script has two names."""
    state = trusted_dir(tmp_path)
    (state / "hash.9" / "job.29").mkdir(parents=True)
    (state / "hash.0" / "job.30").mkdir(parents=True)
    (state / "hash.9/job.29/script").write_text("#!/bin/sh\n#DW jobdw capacity=1GiB\n")
    os.link(state / "hash.9/job.29/script", state / "hash.0/job.30/script")
    for job, path in (("29", "hash.9/job.29/script"), ("30", "hash.0/job.30/script")):
        fd = sa.open_read(str(state / path), "the job script", ROOT, job, ("script",))
        assert os.read(fd, 100).startswith(b"#!/bin/sh\n#DW jobdw")
        os.close(fd)


@pytest.mark.parametrize(
    "make,why",
    [
        (lambda f: f.chmod(0o666), "writable by others \\(mode 0666\\)"),
        (lambda f: f.chmod(0o620), "writable by others \\(mode 0620\\)"),
        (lambda f: os.chown(f, 1234, 0), "owned by uid 1234, not root or SlurmUser"),
        (_fifo_instead, "not a regular file"),
    ],
)
def test_a_script_anyone_else_could_change_is_refused_even_with_one_name(tmp_path, make, why):
    job = trusted_dir(tmp_path) / "hash.7" / "job.7"
    job.mkdir(parents=True)
    (job / "script").write_text("#!/bin/sh\n")
    make(job / "script")
    with pytest.raises(sa.Refused, match=why):
        sa.open_read(str(job / "script"), "the job script", ROOT, "7", ("script",))


def array_state(tmp_path, mode=0o700):
    """Slurm 24.11's state directory for array 1 whose task 2 was split off: the array's
    script, the task's hash directory, no job directory of the task's."""
    state = trusted_dir(tmp_path)
    (state / "hash.1" / "job.1").mkdir(parents=True)
    (state / "hash.2").mkdir(mode=0o700)
    (state / "hash.1/job.1/script").write_text("#!/bin/sh\n#DW jobdw capacity=1GiB\n")
    (state / "hash.1/job.1/script").chmod(mode)
    return state


def test_a_task_script_slurm_never_wrote_is_linked_from_the_arrays(tmp_path):
    state = array_state(tmp_path)
    path = str(state / "hash.2/job.2/script")
    with pytest.raises(sa.Missing):
        sa.open_read(path, "the job script", ROOT, "2", ("script",))
    for _ in range(2):  # a call run again finds the link made
        fd = sa.link_task_script(path, "2", lambda: "1", ROOT)
        assert os.read(fd, 100).startswith(b"#!/bin/sh\n#DW jobdw")
        os.close(fd)
    task, array = os.stat(path), os.stat(state / "hash.1/job.1/script")
    assert (task.st_ino, task.st_nlink) == (array.st_ino, 2)  # the array's file, not a copy
    job_dir = os.stat(state / "hash.2/job.2")
    assert (job_dir.st_mode & 0o7777, job_dir.st_uid) == (0o700, 0)  # as Slurm makes it


@pytest.mark.parametrize(
    "path,array",
    [
        ("hash.2/job.2/script", lambda: None),  # not a task: scontrol names no array
        ("hash.2/job.2/script", lambda: "2"),  # the array is the job itself
        ("hash.2/job.2/script", lambda: "3"),  # no such array's script
        ("hash.2/job.2/script", lambda: "1\n"),  # not a job id
        ("hash.2/job.12/script", lambda: "1"),  # another job's directory
        ("hash.2/job.2/path", lambda: "1"),  # not a script
    ],
)
def test_only_this_tasks_script_is_linked_and_only_from_its_arrays(tmp_path, path, array):
    state = array_state(tmp_path)
    with pytest.raises(sa.Missing, match="No such file or directory"):
        sa.link_task_script(str(state / path), "2", array, ROOT)
    assert not (state / path).exists()


def test_a_tasks_path_file_gets_the_job_directory_slurm_never_made(tmp_path):
    state = array_state(tmp_path)
    fd = sa.open_write(str(state / "hash.2/job.2/path"), "the path file", ROOT, "2", ("path",))
    os.write(fd, b"DW_JOB_STRIPED=/mnt/2/striped\n")
    os.close(fd)
    assert (state / "hash.2/job.2/path").read_text() == "DW_JOB_STRIPED=/mnt/2/striped\n"
    assert os.stat(state / "hash.2/job.2").st_mode & 0o7777 == 0o700
    with pytest.raises(sa.Missing):  # outside Slurm's layout, nothing is made
        sa.open_write(str(state / "other/path"), "the path file", ROOT, "2", ("path",))
    assert not (state / "other").exists()


def test_an_arrays_script_anyone_else_could_change_is_not_linked(tmp_path):
    state = array_state(tmp_path, mode=0o766)
    with pytest.raises(sa.Refused, match="writable by others"):
        sa.link_task_script(str(state / "hash.2/job.2/script"), "2", lambda: "1", ROOT)
    assert not (state / "hash.2/job.2/script").exists()


def test_slurms_memfd_is_read_only_from_a_trusted_process(tmp_path):
    fd = os.memfd_create("script")
    os.write(fd, b"#!/bin/sh\n")
    got = sa.open_read(f"/proc/{os.getpid()}/fd/{fd}", "the job script", ROOT)
    assert os.read(got, 100) == b"#!/bin/sh\n"
    with pytest.raises(sa.Refused, match="root or SlurmUser"):
        sa.open_read(f"/proc/{os.getpid()}/fd/{fd}", "the job script", frozenset({1}))


def test_the_public_line_has_no_error_text():
    v = {
        "buffer": "7",
        "desired_state": "staged_in",
        "hosts": [
            {
                "host": "h1",
                "state": "created",
                "step": "stage_in",
                "progress": None,
                "error": {"category": "user", "message": "/home/alice/secret: no such file"},
            }
        ],
    }
    line = public_line(v)
    assert line == (
        "buffer 7: created -> staged_in, stage_in, failed (its owner sees why with dacctl status)"
    )
