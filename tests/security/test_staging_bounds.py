"""Staging is bounded (issue 16, item 2): what a user names as a list or a source cannot
block the copier or fill its memory, a huge sparse file costs what its data costs, a stage
that never ends is killed by dacd, teardown stops a stage at once, and stuck stages never
take the workers other buffers need. Real dacd, real uids, loop-device bricks."""

import os
import socket
import subprocess
import threading
import time

import pytest
from clitools import pools, run
from security.staging_dac import (
    GID,
    STAGE_TIMEOUT,
    UID,
    buffer_fs,
    copiers,
    down,
    next_job_runs,
    owned,
    setup,
    slurm,
    stopping_copiers,
    up,
    write,
)
from split_staging import stage_line, stage_split  # noqa: F401 - autouse: run split too

from dacd.staging.run import COPIER, interpreter

NOT_REGULAR = "not a regular file (FIFOs, devices and sockets are not staged)"


def refused(env, job, script, line):
    r = slurm(env, "data_in", job, "--job", str(script), check=False)
    assert (r.returncode, r.stdout) == (1, stage_line(f"buffer {job}: stage_in failed: {line}\n"))
    slurm(env, "teardown", job, "--job", str(script), "--hurry")


def test_staging_fifo_device_socket_and_proc_fd_as_list_or_source_are_refused(
    dac, open_dir, tmp_path
):
    workdir, env, store = dac
    src = owned(open_dir / "src")
    os.mkfifo(src / "fifo")
    os.chown(src / "fifo", UID, GID)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "sock"))
    os.chown(src / "sock", UID, GID)
    listing = write(src / "names", f"{src}/sock s\n".encode())
    job = 80
    for kind, source, line in [
        ("list", src / "fifo", f"{src}/fifo: not a regular file (a list must be one)"),
        ("list", "/dev/zero", "/dev/zero: not a regular file (a list must be one)"),
        ("list", "/proc/self/fd/0", "/proc/self/fd/0: a link; name the list file itself"),
        ("file", src / "fifo", f"{src}/fifo: {NOT_REGULAR}"),
        ("file", "/dev/zero", f"/dev/zero: {NOT_REGULAR}"),
        ("list", listing, f"{src}/sock: {NOT_REGULAR}"),
    ]:
        script = setup(
            env,
            tmp_path,
            job,
            "512MiB",
            f"#DW stage_in type={kind} source={source} destination=$DW_JOB_STRIPED/x",
        )
        started = time.monotonic()
        refused(env, job, script, line)
        assert time.monotonic() - started < 10, (kind, source)
        job += 1
    sock.close()
    next_job_runs(workdir, env, store, tmp_path, open_dir, job)


def test_staging_a_fifo_swapped_in_after_the_walk_fails_the_worker_at_once(open_dir):
    """What a worker gets after the walk saw a regular file: the path is now a FIFO. The
    worker's own functions, run as the user the way the copier's workers run them."""
    src = owned(open_dir / "src")
    os.mkfifo(src / "was-a-file")
    os.chown(src / "was-a-file", UID, GID)
    dst = owned(open_dir / "dst")
    code = (
        f"import sys; sys.path.insert(0, {os.path.dirname(COPIER)!r}); import copier\n"
        "for call in (lambda: copier.copy_files([(sys.argv[1], sys.argv[2] + '/a', 10, 420, "
        "0, 0, False)]), lambda: copier.copy_chunk((sys.argv[1], sys.argv[2] + '/b', 10, "
        "420, 0, 0, False, 0, 10))):\n"
        "    try:\n        call()\n    except copier.CopyError as e:\n        print(e)\n"
    )
    open(dst / "b", "wb").close()
    os.chown(dst / "b", UID, GID)
    r = subprocess.run(
        [interpreter(), "-I", "-S", "-c", code, str(src / "was-a-file"), str(dst)],
        capture_output=True,
        text=True,
        user=UID,
        group=GID,
        timeout=20,
    )
    assert (r.returncode, r.stdout) == (0, f"{src}/was-a-file: {NOT_REGULAR}\n" * 2), r.stderr


def test_staging_a_100000_line_list_works_and_a_bigger_one_is_refused(dac, open_dir, tmp_path):
    workdir, env, store = dac
    src = owned(open_dir / "src")
    empty = write(src / "empty", b"")
    lines = "".join(f"{empty} d{i // 1000}/f{i % 1000}\n" for i in range(100_000))
    listing = write(src / "list", lines.encode())
    script = setup(
        env,
        tmp_path,
        90,
        "512MiB",
        f"#DW stage_in type=list source={listing} destination=$DW_JOB_STRIPED/l",
    )
    started = time.monotonic()
    slurm(env, "data_in", 90, "--job", str(script))
    assert time.monotonic() - started < STAGE_TIMEOUT
    inside = buffer_fs(workdir, store, 90) / "striped" / "l"
    assert sorted(os.listdir(inside / "d99")) == sorted(f"f{i}" for i in range(1000))
    slurm(env, "teardown", 90, "--job", str(script), "--hurry")
    for job, text, line in [
        (91, lines * 2 + f"{empty} one-more\n", f"{listing}: more than 200000 entries to stage"),
        (92, "#" * (17 << 20) + "\n", f"{listing}: a list of more than 16 MiB"),
    ]:
        write(listing, text.encode())
        script = setup(
            env,
            tmp_path,
            job,
            "512MiB",
            f"#DW stage_in type=list source={listing} destination=$DW_JOB_STRIPED/l",
        )
        started = time.monotonic()
        refused(env, job, script, line)
        assert time.monotonic() - started < 10
    next_job_runs(workdir, env, store, tmp_path, open_dir, 93)


def test_staging_an_8_eib_sparse_file_is_copied_by_its_data(dac, open_dir, tmp_path):
    """2^63-1 bytes apparent (the most a file may have; tmpfs and xfs allow it), 2 MiB of
    data: the copier's work follows the data, not the size."""
    workdir, env, store = dac
    shm = owned(open_dir / "shm")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(shm)], check=True)
    try:
        os.chmod(shm, 0o755)
        huge, size = shm / "huge", (1 << 63) - 1
        head, middle = os.urandom(1 << 20), os.urandom(1 << 20)
        with open(huge, "wb") as f:
            f.write(head)
            f.seek(1 << 62)
            f.write(middle)
            f.truncate(size)
        os.chown(huge, UID, GID)
        script = setup(
            env,
            tmp_path,
            94,
            "512MiB",
            f"#DW stage_in type=file source={huge} destination=$DW_JOB_STRIPED/huge",
        )
        started = time.monotonic()
        slurm(env, "data_in", 94, "--job", str(script))
        assert time.monotonic() - started < 10
        copy = buffer_fs(workdir, store, 94) / "striped" / "huge"
        st = os.stat(copy)
        assert st.st_size == size and st.st_blocks * 512 < 16 << 20
        with open(copy, "rb") as f:
            assert f.read(1 << 20) == head
            f.seek(1 << 62)
            assert f.read(1 << 20) == middle
        (status,) = store.statuses("94").values()
        assert status.progress.bytes_done == status.progress.bytes_total == size
        slurm(env, "teardown", 94, "--job", str(script), "--hurry")
    finally:
        subprocess.run(["umount", str(shm)], check=True)
    next_job_runs(workdir, env, store, tmp_path, open_dir, 95)


def big_source(open_dir):
    src = owned(open_dir / "big")
    with open(src / "data", "wb") as f:  # long enough to catch its copier at work
        block = os.urandom(8 << 20)
        for _ in range(40):
            f.write(block)
    os.chown(src / "data", UID, GID)
    return src


def test_staging_a_stage_that_never_ends_is_killed_by_the_timeout(dac, open_dir, tmp_path):
    workdir, env, store = dac
    src = big_source(open_dir)
    script = setup(
        env,
        tmp_path,
        96,
        "512MiB",
        f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in",
    )
    started = time.monotonic()
    result: dict = {}
    caller = threading.Thread(
        target=lambda: result.update(r=slurm(env, "data_in", 96, "--job", str(script), check=False))
    )
    with stopping_copiers() as next_stopped:
        caller.start()
        next_stopped()
    caller.join(STAGE_TIMEOUT + 30)
    from dacd.staging.run import time_limit  # here: the code before it had none (see the report)

    limit = time_limit(STAGE_TIMEOUT)
    assert (result["r"].returncode, result["r"].stdout) == (
        1,
        f"buffer 96: stage_in timed out after {limit:.0f} s\n",
    )
    # dacd's line, not dacctl giving up at STAGE_TIMEOUT; a loaded machine adds seconds
    assert limit <= time.monotonic() - started < STAGE_TIMEOUT + 10
    assert copiers() == []
    slurm(env, "teardown", 96, "--job", str(script), "--hurry")
    next_job_runs(workdir, env, store, tmp_path, open_dir, 97)


def test_staging_teardown_stops_a_running_stage_and_frees_its_bricks(dac, open_dir, tmp_path):
    workdir, env, store = dac
    src = big_source(open_dir)
    script = setup(
        env,
        tmp_path,
        98,
        "512MiB",
        f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in",
    )
    caller = threading.Thread(
        target=slurm, args=(env, "data_in", 98, "--job", str(script)), kwargs={"check": False}
    )
    with stopping_copiers() as next_stopped:
        caller.start()
        next_stopped()
    started = time.monotonic()
    slurm(env, "teardown", 98, "--job", str(script))
    assert time.monotonic() - started < 10
    assert store.buffer("98") is None and copiers() == []
    pool = pools(env)["default"]
    assert pool["free_bricks"] == pool["total_bricks"]
    caller.join(STAGE_TIMEOUT + 30)
    next_job_runs(workdir, env, store, tmp_path, open_dir, 99)


@pytest.fixture
def big_dac(open_dir):
    """One server of 7 bricks (every buffer on the same dacd); stages may take 5 minutes."""
    workdir = open_dir / "dac"
    env, store = up(workdir, servers=1, bricks=7, stage_timeout=300)
    yield workdir, env, store
    down(workdir)


def test_staging_five_stuck_stages_never_block_another_buffer(big_dac, open_dir, tmp_path):
    workdir, env, store = big_dac
    src = big_source(open_dir)
    callers = []
    with stopping_copiers() as next_stopped:
        for job in range(100, 105):
            script = setup(
                env,
                tmp_path,
                job,
                "512MiB",
                f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in",
            )
            caller = threading.Thread(
                target=slurm,
                args=(env, "data_in", job, "--job", str(script)),
                kwargs={"check": False},
            )
            caller.start()
            callers.append((job, script, caller))
            if job < 104:  # the fifth waits for a stage thread: there are `concurrency` (4)
                next_stopped()
    started = time.monotonic()
    script = setup(env, tmp_path, 105, "512MiB")
    slurm(env, "teardown", 105, "--job", str(script))
    assert time.monotonic() - started < 30 and store.buffer("105") is None
    for job, script, caller in callers:
        started = time.monotonic()
        slurm(env, "teardown", job, "--job", str(script))
        assert time.monotonic() - started < 15 and store.buffer(str(job)) is None
        caller.join(30)
    assert copiers() == []
    pool = pools(env)["default"]
    assert pool["free_bricks"] == pool["total_bricks"] == 7
    run("dacctl", "pools", env=env)
    next_job_runs(workdir, env, store, tmp_path, open_dir, 106)
