"""Staging through real dacd processes, as the job's user: real uids, real permissions, a real
filesystem in the buffer."""

import json
import os

from clitools import run, setup, slurm
from split_staging import stage_line, stage_split  # noqa: F401 - autouse: run split too

from daccore.units import format_size

UID, GID = 1234, 4321


def owned(path, uid=UID, gid=GID, mode=None):
    os.makedirs(path, exist_ok=True)
    os.chown(path, uid, gid)
    if mode is not None:
        os.chmod(path, mode)
    return path


def write(path, data=b"x", uid=UID, gid=GID, mode=0o640):
    with open(path, "wb") as f:
        f.write(data)
    os.chown(path, uid, gid)
    os.chmod(path, mode)


def stages(src, destination, out_source="$DW_JOB_STRIPED/in"):
    """A directory staged in to $DW_JOB_STRIPED/in, and `out_source` staged out."""
    return (
        f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in",
        f"#DW stage_out type=directory source={out_source} destination={destination}",
    )


def test_stage_in_and_out_copy_as_the_user(dac, open_dir, tmp_path):
    workdir, env, store = dac
    src = owned(open_dir / "in")
    owned(src / "sub")
    write(src / "a.txt", b"alpha\n", mode=0o600)
    write(src / "sub" / "b.bin", os.urandom(3 << 20))
    os.symlink("/etc/shadow", src / "shadow")
    with open(src / "sparse", "wb") as f:
        f.truncate(64 << 20)
        f.write(b"head")
    os.chown(src / "sparse", UID, GID)
    os.utime(src / "a.txt", ns=(1_000_000_000, 1_500_000_000_000_000_000))
    out = owned(open_dir / "results")
    script = setup(env, tmp_path, 51, "512MiB", *stages(src, f"{out}/run1"))
    slurm(env, "data_in", 51, "--job", str(script))
    host = store.buffer("51").record.allocation.primary_host
    inside = workdir / "fs" / host / "51" / "mnt" / "striped" / "in"
    assert (inside / "a.txt").read_bytes() == b"alpha\n"
    st = os.stat(inside / "a.txt")
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777, st.st_mtime_ns) == (
        UID,
        GID,
        0o600,
        1_500_000_000_000_000_000,
    )
    assert (inside / "sub" / "b.bin").read_bytes() == (src / "sub" / "b.bin").read_bytes()
    assert os.readlink(inside / "shadow") == "/etc/shadow"  # a link, not the shadow file
    assert os.stat(inside / "sparse").st_blocks * 512 < 1 << 20  # still sparse
    (status,) = store.statuses("51").values()
    assert status.progress.files_done == status.progress.files_total == 4
    assert status.progress.bytes_done == status.progress.bytes_total
    # what people see: dacctl status (table, --json, --line: scontrol show bbstat 51)
    v = json.loads(run("dacctl", "status", "51", "--json", env=env).stdout)
    assert v["desired_state"] == "staged_in" and v["hosts"][0]["state"] == "staged_in"
    assert v["hosts"][0]["progress"]["files_done"] == 4
    line = run("dacctl", "status", "51", "--line", env=env).stdout
    progress = v["hosts"][0]["progress"]
    total, rate = progress["bytes_total"], progress["rate"]
    assert rate > 0 and progress["eta"] == 0 and progress["counting"] is False
    assert line == (
        f"buffer 51: staged_in, staged {format_size(total)}/{format_size(total)} "
        f"100% 4/4 files at {format_size(rate)}/s\n"
    )
    table = run("dacctl", "status", "51", env=env).stdout
    assert table.startswith("buffer 51: staged_in") and host in table and "4/4 files" in table
    r = run("dacctl", "status", "nope", env=env, check=False)
    assert (r.returncode, r.stderr.strip()) == (
        1,
        "dacctl: user error: no buffer 'nope' of yours (a job id or a persistent buffer's name)",
    )

    slurm(env, "data_out", 51, "--job", str(script))
    result = out / "run1"
    assert (result / "a.txt").read_bytes() == b"alpha\n"
    for path in (result, result / "a.txt", result / "sub" / "b.bin"):
        st = os.lstat(path)
        assert (st.st_uid, st.st_gid) == (UID, GID), path
    slurm(env, "teardown", 51, "--job", str(script))


def test_a_file_the_user_cannot_read_is_not_staged(dac, open_dir, tmp_path):
    _, env, store = dac
    secret = open_dir / "secret"
    write(secret, b"root only", uid=0, gid=0, mode=0o600)
    script = setup(
        env,
        tmp_path,
        52,
        "512MiB",
        f"#DW stage_in type=file source={secret} destination=$DW_JOB_STRIPED/s",
    )
    r = slurm(env, "data_in", 52, "--job", str(script), check=False)
    assert (r.returncode, r.stdout) == (
        1,
        stage_line(f"buffer 52: stage_in failed: {secret}: Permission denied\n"),
    )
    (status,) = store.statuses("52").values()
    assert status.error.category.value == "user"
    slurm(env, "teardown", 52, "--job", str(script))


def test_a_link_in_the_buffer_cannot_take_stage_out_outside(dac, open_dir, tmp_path):
    workdir, env, store = dac
    src = owned(open_dir / "in2")
    write(src / "f")
    out = owned(open_dir / "out2")
    script = setup(env, tmp_path, 53, "512MiB", *stages(src, f"{out}/x", "$DW_JOB_STRIPED/escape"))
    slurm(env, "data_in", 53, "--job", str(script))
    host = store.buffer("53").record.allocation.primary_host
    os.symlink(
        "/etc", workdir / "fs" / host / "53" / "mnt" / "striped" / "escape"
    )  # the job made it
    r = slurm(env, "data_out", 53, "--job", str(script), check=False)
    fs = workdir / "fs" / host / "53" / "mnt" / "striped"
    assert (r.returncode, r.stdout) == (
        1,
        stage_line(f"buffer 53: stage_out failed: {fs}/escape: resolves outside the buffer\n"),
    )
    assert not (out / "x").exists()
    slurm(env, "teardown", 53, "--job", str(script), "--hurry")  # a failed stage-out keeps it


def test_teardown_stages_out_a_job_that_ran_unless_hurry(dac, open_dir, tmp_path):
    workdir, env, store = dac
    src = owned(open_dir / "in3")
    write(src / "f", b"result\n")
    out = owned(open_dir / "out3")
    nodes = tmp_path / "nodes"
    nodes.write_text("node1\n")
    lines = stages(src, f"{out}/r")
    # a job that ran (mounted) and was torn down without post_run or data_out: staged out
    script = setup(env, tmp_path, 54, "512MiB", *lines)
    for function in ("data_in", "pre_run"):
        slurm(env, function, 54, "--job", str(script), "--nodehostnamefile", str(nodes))
    slurm(env, "teardown", 54, "--job", str(script))
    assert (out / "r" / "f").read_bytes() == b"result\n" and store.buffer("54") is None
    # the same with --hurry: nothing staged out
    script = setup(env, tmp_path, 55, "512MiB", *stages(src, f"{out}/hurried"))
    for function in ("data_in", "pre_run"):
        slurm(env, function, 55, "--job", str(script), "--nodehostnamefile", str(nodes))
    slurm(env, "teardown", 55, "--job", str(script), "--hurry")
    assert not (out / "hurried").exists() and store.buffer("55") is None


def test_a_failed_stage_out_keeps_the_buffer_until_a_hurried_teardown(dac, open_dir, tmp_path):
    _, env, store = dac
    src = owned(open_dir / "in4")
    write(src / "f")
    locked = owned(open_dir / "locked", uid=0, gid=0, mode=0o755)  # the user may not write here
    script = setup(env, tmp_path, 56, "512MiB", *stages(src, f"{locked}/r"))
    slurm(env, "data_in", 56, "--job", str(script))
    r = slurm(env, "data_out", 56, "--job", str(script), check=False)
    assert (r.returncode, r.stdout) == (
        1,
        stage_line(f"buffer 56: stage_out failed: {locked}/r: Permission denied\n"),
    )
    r = slurm(env, "teardown", 56, "--job", str(script), check=False)
    assert (r.returncode, r.stdout) == (
        1,
        stage_line(f"buffer 56: stage_out failed: {locked}/r: Permission denied\n"),
    )
    assert store.buffer("56") is not None  # kept: the data is still there to rescue
    slurm(env, "teardown", 56, "--job", str(script), "--hurry")
    assert store.buffer("56") is None


def test_a_list_stages_each_pair_and_data_too_big_is_refused_before_copying(
    dac, open_dir, tmp_path
):
    workdir, env, store = dac
    src = owned(open_dir / "in5")
    write(src / "one", b"1\n")
    owned(src / "tree")
    write(src / "tree" / "two", b"2\n")
    listing = src / "files.txt"
    write(listing, f"# what to stage\n{src}/one first/one\n{src}/tree second\n".encode())
    big = src / "big"
    with open(big, "wb") as f:  # real data: more than the 512 MiB buffer can hold
        block = os.urandom(1 << 20)
        for _ in range(600):
            f.write(block)
    os.chown(big, UID, GID)
    script = setup(
        env,
        tmp_path,
        57,
        "512MiB",
        f"#DW stage_in type=list source={listing} destination=$DW_JOB_STRIPED/l",
        f"#DW stage_out type=file source=$DW_JOB_STRIPED/l/first/one destination={src}/back",
    )
    slurm(env, "data_in", 57, "--job", str(script))
    host = store.buffer("57").record.allocation.primary_host
    inside = workdir / "fs" / host / "57" / "mnt" / "striped" / "l"
    assert (inside / "first" / "one").read_bytes() == b"1\n"
    assert (inside / "second" / "two").read_bytes() == b"2\n"
    assert os.stat(inside / "first").st_mode & 0o777 == 0o700  # made for a file: private
    slurm(env, "teardown", 57, "--job", str(script), "--hurry")

    script = setup(
        env,
        tmp_path,
        58,
        "512MiB",
        f"#DW stage_in type=file source={big} destination=$DW_JOB_STRIPED/big",
    )
    r = slurm(env, "data_in", 58, "--job", str(script), check=False)
    fs = workdir / "fs" / store.buffer("58").record.allocation.primary_host / "58" / "mnt"
    assert r.returncode == 1 and r.stdout.startswith(
        f"buffer 58: stage_in failed: {fs}/striped: not enough space for the data to stage ("
    )
    assert r.stdout.endswith(" MiB free)\n") and not (fs / "striped" / "big").exists()
    slurm(env, "teardown", 58, "--job", str(script), "--hurry")


def test_the_copier_starts_where_the_user_cannot_reach_dacs_files(open_dir, tmp_path, monkeypatch):
    """dac cloned under /root (0700), as on a fresh machine: the user's copier still runs."""
    import shutil
    from types import SimpleNamespace

    from daccore.records.models import StageType
    from dacd.staging import run as staging

    private = tmp_path / "root-only"
    private.mkdir(mode=0o700)
    shutil.copy(staging.COPIER, private / "copier.py")
    monkeypatch.setattr(staging, "COPIER", str(private / "copier.py"))
    src = owned(open_dir / "src")
    write(src / "data", b"42\n")
    fs = owned(open_dir / "fs", 0, 0, 0o755)
    owned(fs / "striped", mode=0o700)
    line = SimpleNamespace(
        type=StageType.DIRECTORY, source=str(src), destination="$DW_JOB_STRIPED/in"
    )
    buffer = SimpleNamespace(
        owner_uid=UID, owner_gid=GID, request=SimpleNamespace(stage_in=[line], stage_out=[])
    )
    staging.stage(buffer, "in", str(fs), 2, lambda progress: None)
    copied = fs / "striped" / "in" / "data"
    assert copied.read_bytes() == b"42\n" and copied.stat().st_uid == UID


def test_a_stage_run_again_after_a_cut_short_copy_has_room_for_what_it_replaces(
    dac, open_dir, tmp_path
):
    """A dacd killed mid stage-in leaves part of the data in the buffer; its restarted dacd
    runs the stage again, which replaces those files: 2 x 200 MiB of them fit a 512 MiB
    buffer that already holds 300 MiB of their first copy (the count used to say no room)."""
    workdir, env, store = dac
    src = owned(open_dir / "again")
    block = os.urandom(1 << 20)
    for name in ("a", "b"):
        write(src / name, block * 200)
    script = setup(
        env,
        tmp_path,
        59,
        "512MiB",
        f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in",
    )
    host = store.buffer("59").record.allocation.primary_host
    inside = owned(workdir / "fs" / host / "59" / "mnt" / "striped" / "in")
    write(inside / "a", block * 200)  # as a copy cut short left it
    write(inside / "b", block * 100)
    slurm(env, "data_in", 59, "--job", str(script))
    assert (inside / "a").read_bytes() == (inside / "b").read_bytes() == block * 200
    slurm(env, "teardown", 59, "--job", str(script), "--hurry")
