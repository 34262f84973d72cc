"""The copier on its own, run as a real unprivileged user exactly as dacd starts it: its
progress lines, its forked workers, big files in chunks, and failures found while it walks."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from dacd.staging import copier
from dacd.staging.run import COPIER, interpreter
from daclocal import loopdev

UID = GID = 1234


def owned(path, mode=0o755):
    os.makedirs(path, exist_ok=True)
    os.chown(path, UID, GID)
    os.chmod(path, mode)
    return path


def run_copier(src, dst, inside, kind="directory", workers=3, chunk=256 << 20):
    plan = copier.encode_plan(
        [{"type": kind, "source": str(src), "destination": str(dst)}],
        str(inside),
        "destination",
        workers,
        chunk,
    )
    r = subprocess.run(
        [interpreter(), "-I", "-S", COPIER],
        input=plan,
        capture_output=True,
        user=UID,
        group=GID,
        extra_groups=[GID],
        cwd="/",
        timeout=120,
    )
    return (
        r.returncode,
        [json.loads(line) for line in r.stdout.decode().splitlines()],
        r.stderr.decode(),
    )


def test_many_files_and_a_chunked_big_file_arrive_whole_with_progress(open_dir):
    src = owned(open_dir / "src")
    for d in range(5):
        owned(src / f"d{d}")
        for f in range(100):  # more than one batch per directory
            (src / f"d{d}" / f"f{f}").write_bytes(os.urandom(f * 7))
    big = os.urandom((5 << 20) + 12345)  # five whole chunks of 1 MiB and a short one
    (src / "big").write_bytes(big)
    os.chmod(src / "big", 0o640)
    os.utime(src / "big", ns=(1_000_000_000, 2_000_000_000))
    for dirpath, dirs, files in os.walk(src):
        for name in dirs + files:
            os.chown(os.path.join(dirpath, name), UID, GID)
    inside = owned(open_dir / "buffer")
    rc, lines, stderr = run_copier(src, inside / "in", inside, chunk=1 << 20)
    assert (rc, stderr, lines[-1]) == (0, "", {"done": True})
    first, final = lines[0], lines[-2]
    assert first == {
        "bytes_done": 0,
        "bytes_total": 0,
        "files_done": 0,
        "files_total": 0,
        "rate": 0,
        "eta": None,
        "counting": True,
    }
    total = sum(f * 7 for f in range(100)) * 5 + len(big)
    assert (
        final["bytes_done"],
        final["bytes_total"],
        final["files_done"],
        final["files_total"],
    ) == (total, total, 501, 501)
    assert final["counting"] is False and final["eta"] == 0 and final["rate"] > 0
    assert (inside / "in" / "big").read_bytes() == big
    st = os.stat(inside / "in" / "big")
    assert (st.st_uid, st.st_mode & 0o7777, st.st_mtime_ns) == (UID, 0o640, 2_000_000_000)
    for d in range(5):
        for f in range(100):
            copied = inside / "in" / f"d{d}" / f"f{f}"
            assert copied.read_bytes() == (src / f"d{d}" / f"f{f}").read_bytes()


def test_an_empty_directory_is_copied_and_done_at_once(open_dir):
    src = owned(open_dir / "src" / "empty", mode=0o750)
    inside = owned(open_dir / "buffer")
    rc, lines, stderr = run_copier(src, inside / "in", inside)
    assert (rc, stderr, lines[-1]) == (0, "", {"done": True})
    assert lines[-2] == {
        "bytes_done": 0,
        "bytes_total": 0,
        "files_done": 0,
        "files_total": 0,
        "rate": 0,
        "eta": 0.0,
        "counting": False,
    }
    assert os.listdir(inside / "in") == [] and os.stat(inside / "in").st_mode & 0o7777 == 0o750


def test_a_directory_found_unreadable_mid_walk_fails_the_stage_naming_it(open_dir):
    src = owned(open_dir / "src")
    owned(src / "a")
    for f in range(300):
        (src / "a" / f"f{f}").write_bytes(b"x")
        os.chown(src / "a" / f"f{f}", UID, GID)
    owned(src / "secret", mode=0o755)
    os.chown(src / "secret", 0, 0)
    os.chmod(src / "secret", 0o700)  # root's, inside the user's tree
    inside = owned(open_dir / "buffer")
    rc, lines, _ = run_copier(src, inside / "in", inside)
    assert rc == 1 and lines[-1] == {"error": f"{src}/secret: Permission denied"}
    assert not any(line.get("done") for line in lines)


def test_a_tree_deeper_than_pythons_recursion_limit_is_copied(open_dir):
    src = owned(open_dir / "src")
    inside = owned(open_dir / "buffer")
    try:
        deep = src
        for _ in range(1100):  # os.makedirs, os.walk and shutil.rmtree all recurse
            deep = deep / "d"
            deep.mkdir()
        (deep / "leaf").write_bytes(b"bottom")
        subprocess.run(["chown", "-R", f"{UID}:{GID}", str(src)], check=True)
        rc, lines, _ = run_copier(src, inside / "in", inside, workers=1)
        assert (rc, lines[-1]) == (0, {"done": True})
        assert (inside / "in" / deep.relative_to(src) / "leaf").read_bytes() == b"bottom"
    finally:
        subprocess.run(["rm", "-rf", str(src), str(inside)], check=True)


def test_a_chunk_tells_its_progress_as_it_goes(tmp_path, monkeypatch):
    monkeypatch.setattr(copier, "PART", 1 << 20)
    data = os.urandom(5 << 20)
    (tmp_path / "src").write_bytes(data)
    with open(tmp_path / "dst", "wb") as f:
        f.truncate(len(data))
    told: list[int] = []
    item = (
        str(tmp_path / "src"),
        str(tmp_path / "dst"),
        len(data),
        0o644,
        0,
        0,
        False,
        1 << 20,
        len(data) - 1000,
    )
    rest = copier.copy_chunk(item, told.append)
    assert told and all(n >= 1 << 20 for n in told)
    assert sum(told) + rest == len(data) - 1000 - (1 << 20)
    copied = (tmp_path / "dst").read_bytes()
    assert copied[1 << 20 : -1000] == data[1 << 20 : -1000] and copied[: 1 << 20] == bytes(1 << 20)


def test_a_worker_yields_the_cpu_and_one_that_dies_fails_the_stage_in_one_line(tmp_path):
    workers = copier.Workers(1)
    try:
        ((pid, _, _),) = workers.procs
        # the worker yields the CPU to the walk feeding it
        deadline = time.monotonic() + 5
        while os.getpriority(os.PRIO_PROCESS, pid) != os.nice(0) + copier.WORKER_NICE:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        item = (str(tmp_path / "nope"), str(tmp_path / "x"), 1, 0o644, 0, 0, False)
        with pytest.raises(copier.CopyError, match="^copier failed: a copy worker died$"):
            workers.send(("files", [item]), lambda copied, files: None)
            workers.drain(lambda copied, files: None)
    finally:
        workers.stop(kill=True)
    assert workers.procs == []


def test_workers_of_named_files_alone_keep_the_copiers_priority():
    """No walk to yield to (an in-job drain of one checkpoint): the workers run at the copier's
    own priority, so a busy storage server does not starve the copy; a tree keeps WORKER_NICE."""
    one: copier.Pair = {"type": "file", "source": "/a", "destination": "/b"}
    assert copier.worker_nice([one, one]) == 0
    for kind in ("directory", "list"):
        assert copier.worker_nice([one, {**one, "type": kind}]) == copier.WORKER_NICE
    workers = copier.Workers(1, 0)
    try:
        ((pid, _, _),) = workers.procs
        time.sleep(0.2)
        assert os.getpriority(os.PRIO_PROCESS, pid) == os.nice(0)
    finally:
        workers.stop(kill=True)


def test_a_big_copy_goes_to_the_disk_as_it_goes_and_leaves_the_page_cache_alone():
    """Every WRITEBACK bytes are handed to the disk and the source's dropped from the cache at
    once; the destination's DROP_LAG steps later, when written: of a 120 MiB copy into xfs on a
    loop device (a brick), at most the last step of the source and the last few of the
    destination stay cached (without the lagged drop all 120 MiB of the destination did)."""
    work = Path(tempfile.mkdtemp(dir="/var/tmp"))  # not /tmp: tmpfs pages cannot be dropped
    device = loopdev.attach(work / "brick.img", 1 << 30)
    try:
        subprocess.run(["mkfs.xfs", "-f", "-q", device], check=True)
        (work / "mnt").mkdir()
        subprocess.run(["mount", device, str(work / "mnt")], check=True)
        data = os.urandom(120 << 20)
        (work / "src").write_bytes(data)
        os.sync()
        dst = work / "mnt" / "dst"
        pid = os.fork()
        if pid == 0:  # in a child, so the copier's anchors do not keep the mount busy
            item = (str(work / "src"), str(dst), len(data), 0o644, 0, 0, False)
            os._exit(0 if copier.copy_files([item]) == (len(data), 1) else 1)
        assert os.waitpid(pid, 0)[1] == 0

        def resident(path: Path) -> int:
            out = subprocess.run(
                ["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                capture_output=True,
                text=True,
                check=True,
            )
            return int(out.stdout)

        assert resident(work / "src") <= copier.WRITEBACK
        assert resident(dst) <= (copier.DROP_LAG + 2) * copier.WRITEBACK
        assert dst.read_bytes() == data
    finally:
        subprocess.run(["umount", str(work / "mnt")], capture_output=True)
        loopdev.detach(device, work / "brick.img")
        shutil.rmtree(work)


@pytest.mark.parametrize("drop", [True, False])
def test_a_buffer_side_source_is_left_to_the_kernel_and_not_written_back_by_the_copy(
    tmp_path, monkeypatch, drop
):
    """A stage_out's source (the buffer) is not advised away: a checkpoint just written is
    dirty, and POSIX_FADV_DONTNEED would first write it back, inside the stage's time
    (_DROP_SOURCE: main clears it when the plan's buffer side is the source). Any other
    source is dropped as before; the destination goes to the disk as it goes either way."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    data = os.urandom(5 * copier.WRITEBACK // 2)
    src.write_bytes(data)
    advised: list[str] = []
    real = os.posix_fadvise

    def fadvise(fd, offset, length, advice):
        if advice == os.POSIX_FADV_DONTNEED:
            advised.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", fadvise)
    monkeypatch.setattr(copier, "_DROP_SOURCE", [drop])
    item = (str(src), str(dst), len(data), 0o644, 0, 0, False)
    assert copier.copy_files([item]) == (len(data), 1)
    assert dst.read_bytes() == data
    assert (str(src) in advised) is drop
    assert str(dst) in advised


def test_the_plan_carries_any_path_but_one_with_a_nul():
    odd = os.fsdecode(b"/data/caf\xe9\nline two")  # not UTF-8, and a newline
    pairs: list[copier.Pair] = [
        {"type": "directory", "source": odd, "destination": "/buffer/striped/in"},
        {"type": "list", "source": "/home/a/list", "destination": "/buffer/striped"},
    ]
    plan = copier.encode_plan(pairs, "/buffer/striped", "destination", 3, 1 << 20)
    assert copier.decode_plan(plan) == (pairs, "/buffer/striped", "destination", 3, 1 << 20)
    with pytest.raises(ValueError, match="NUL"):
        copier.encode_plan(
            [{"type": "file", "source": "/a\0b", "destination": "/b"}], "/b", "destination", 1
        )
    with pytest.raises(copier.CopyError, match="^copier failed: stdin holds no plan$"):
        copier.decode_plan(b'{"pairs": []}')


def test_a_name_that_is_not_utf8_arrives_byte_for_byte(open_dir):
    src = owned(open_dir / "src")
    name = b"caf\xe9\nx"
    with open(os.path.join(os.fsencode(src), name), "wb") as f:
        f.write(b"latin-1 and a newline")
    os.chown(os.path.join(os.fsencode(src), name), UID, GID)
    inside = owned(open_dir / "buffer")
    rc, lines, _ = run_copier(src, inside / "in", inside)
    assert (rc, lines[-1]) == (0, {"done": True})
    assert os.listdir(os.fsencode(inside / "in")) == [name]


def test_workers_copying_across_filesystems_never_mix_their_data(open_dir):
    """Across two filesystems data goes through each worker's own read buffer (here to tmpfs):
    200 files of 256 KiB on 4 workers each arrive with their own bytes."""
    src = owned(open_dir / "src")
    for i in range(200):
        (src / f"f{i}").write_bytes(os.urandom(256 << 10))
        os.chown(src / f"f{i}", UID, GID)
    shm = Path(tempfile.mkdtemp(dir="/dev/shm"))
    shm.chmod(0o755)
    try:
        inside = owned(shm / "buffer")
        assert os.stat(inside).st_dev != os.stat(src).st_dev
        rc, lines, _ = run_copier(src, inside / "in", inside, workers=4)
        assert (rc, lines[-1]) == (0, {"done": True})
        for i in range(200):
            assert (inside / "in" / f"f{i}").read_bytes() == (src / f"f{i}").read_bytes(), i
    finally:
        shutil.rmtree(shm)


def test_a_list_names_each_destination_in_the_buffer_as_the_user_writes_it(open_dir):
    """`#DW stage_in type=list source=<list>` without destination=: each line names its own
    destination, under $DW_JOB_STRIPED (the buffer's path on the storage host is not the
    user's to know) or relative to it."""
    src = owned(open_dir / "src")
    for name in ("a", "b", "c"):
        (src / name).write_text(f"{name}\n")
        os.chown(src / name, UID, GID)
    listing = src / "list"
    listing.write_text(
        f"{src}/a $DW_JOB_STRIPED/x/a\n{src}/b ${{DW_JOB_STRIPED}}/b\n# a comment\n{src}/c rel/c\n"
    )
    os.chown(listing, UID, GID)
    inside = owned(open_dir / "buffer")
    rc, lines, stderr = run_copier(listing, inside, inside, kind="list")
    assert (rc, stderr, lines[-1]) == (0, "", {"done": True})
    assert [(inside / p).read_text() for p in ("x/a", "b", "rel/c")] == ["a\n", "b\n", "c\n"]
    listing.write_text(f"{src}/a $DW_JOB_STRIPED/../escape\n")
    rc, lines, _ = run_copier(listing, inside, inside, kind="list")
    assert rc == 1 and lines[-1] == {
        "error": f"{inside}/../escape: must be an absolute path without '..'"
    }
    assert not (open_dir / "escape").exists()
