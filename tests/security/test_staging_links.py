"""The copier, as the job's user, never writes through a link: not one it copied for an
earlier pair, not one the job made in the buffer, not a list file's (issue 16, item 1).
Real dacd, real uids, loop-device bricks; each attack is refused in one line, root's tree is
unchanged and the next job runs."""

import os

import pytest
from security.staging_dac import (
    as_user,
    buffer_fs,
    next_job_runs,
    owned,
    setup,
    slurm,
    snapshot,
    write,
)
from split_staging import stage_line, stage_split  # noqa: F401 - autouse: run split too

LINK_ERROR = "a link or not a directory (staging follows no link in a destination)"


@pytest.fixture
def root_tree(open_dir):
    """A root-owned directory, the stand-in for /etc."""
    etc = owned(open_dir / "etc", 0, 0, 0o755)
    write(etc / "passwd", b"root:x:0:0\n", 0, 0)
    return etc, snapshot(etc)


def test_staging_a_chain_of_links_never_leaves_the_buffer(dac, open_dir, tmp_path, root_tree):
    """The issue's chain: p -> ../private lands first, then two pairs written through it."""
    workdir, env, store = dac
    etc, before = root_tree
    src = owned(open_dir / "src")
    os.symlink("../private", src / "p")
    os.symlink(str(etc), src / "node")
    script = setup(
        env,
        tmp_path,
        61,
        "512MiB",
        f"#DW stage_in type=file source={src}/p destination=$DW_JOB_STRIPED/p",
        f"#DW stage_in type=file source={src}/node destination=$DW_JOB_STRIPED/p/node1",
        f"#DW stage_in type=file source={src}/node destination=$DW_JOB_STRIPED/p/node2",
    )
    fs = buffer_fs(workdir, store, 61)
    r = slurm(env, "data_in", 61, "--job", str(script), check=False)
    assert (r.returncode, r.stdout) == (
        1,
        stage_line(f"buffer 61: stage_in failed: {fs}/striped/p: {LINK_ERROR}\n"),
    )
    assert not os.path.lexists(fs / "private" / "node1")  # nothing landed beside striped/
    assert not os.path.lexists(fs / "private" / "node2")
    assert os.readlink(fs / "striped" / "p") == "../private"  # the link itself, copied
    slurm(env, "teardown", 61, "--job", str(script), "--hurry")
    assert snapshot(etc) == before
    next_job_runs(workdir, env, store, tmp_path, open_dir, 62)


@pytest.mark.parametrize("where", ["l/x", "a/l/x", "a/b/l/x", "a/b/l/c/x"])
def test_staging_a_link_at_any_component_is_not_followed(dac, open_dir, tmp_path, where):
    """A link the first pair copies, met as any component of a later pair's destination."""
    workdir, env, store = dac
    outside = owned(open_dir / "outside")  # the user's own: a link there would be followed
    src = owned(open_dir / "src")
    os.symlink(str(outside), src / "l")
    write(src / "data", b"data\n")
    link_at = where[: where.index("l") + 1]
    script = setup(
        env,
        tmp_path,
        63,
        "512MiB",
        f"#DW stage_in type=file source={src}/data destination=$DW_JOB_STRIPED/a/b/d",
        f"#DW stage_in type=file source={src}/l destination=$DW_JOB_STRIPED/{link_at}",
        f"#DW stage_in type=file source={src}/data destination=$DW_JOB_STRIPED/{where}",
    )
    fs = buffer_fs(workdir, store, 63)
    r = slurm(env, "data_in", 63, "--job", str(script), check=False)
    assert (r.returncode, r.stdout) == (
        1,
        stage_line(f"buffer 63: stage_in failed: {fs}/striped/{link_at}: {LINK_ERROR}\n"),
    )
    assert os.listdir(outside) == []
    slurm(env, "teardown", 63, "--job", str(script), "--hurry")
    next_job_runs(workdir, env, store, tmp_path, open_dir, 64)


def test_staging_a_link_to_dotdot_and_a_tree_holding_one(dac, open_dir, tmp_path):
    """`up -> ..` copied inside a directory, then a pair through it toward private/."""
    workdir, env, store = dac
    src = owned(open_dir / "tree")
    os.symlink("..", src / "up")
    write(src / "f", b"f\n")
    script = setup(
        env,
        tmp_path,
        65,
        "512MiB",
        f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in",
        f"#DW stage_in type=file source={src}/f destination=$DW_JOB_STRIPED/in/up/up/private/x",
    )
    fs = buffer_fs(workdir, store, 65)
    r = slurm(env, "data_in", 65, "--job", str(script), check=False)
    assert (r.returncode, r.stdout) == (
        1,
        stage_line(f"buffer 65: stage_in failed: {fs}/striped/in/up: {LINK_ERROR}\n"),
    )
    assert not os.path.lexists(fs / "private" / "x")
    slurm(env, "teardown", 65, "--job", str(script), "--hurry")
    next_job_runs(workdir, env, store, tmp_path, open_dir, 66)


def test_staging_links_and_hard_links_the_job_made_are_replaced_not_written_through(
    dac, open_dir, tmp_path
):
    """The user, in the buffer before a stage (a login on the storage server, a job before
    stage_out), makes a symlink and a hard link where the stage will write: both are replaced
    by the copies, the files they led to keep their bytes."""
    workdir, env, store = dac
    keep = write(owned(open_dir / "mine") / "keep", b"keep me\n")
    src = owned(open_dir / "src")
    write(src / "a", b"new a\n")
    write(src / "b", b"new b\n")
    script = setup(
        env,
        tmp_path,
        67,
        "512MiB",
        f"#DW stage_in type=file source={src}/a destination=$DW_JOB_STRIPED/a",
        f"#DW stage_in type=file source={src}/b destination=$DW_JOB_STRIPED/b",
        f"#DW stage_out type=file source=$DW_JOB_STRIPED/a destination={open_dir}/back/sub/a",
        f"#DW stage_out type=file source=$DW_JOB_STRIPED/l destination={open_dir}/back/l",
        f"#DW stage_out type=file source=$DW_JOB_STRIPED/a destination={open_dir}/back/l/a",
    )
    striped = buffer_fs(workdir, store, 67) / "striped"
    as_user("ln", "-s", str(keep), str(striped / "a"))
    as_user("cp", str(keep), str(striped / "keep"))  # a hard link stays on its filesystem
    as_user("ln", str(striped / "keep"), str(striped / "b"))
    slurm(env, "data_in", 67, "--job", str(script))
    assert (striped / "a").read_bytes() == b"new a\n" and not (striped / "a").is_symlink()
    assert (striped / "b").read_bytes() == b"new b\n" and os.stat(striped / "b").st_nlink == 1
    assert keep.read_bytes() == (striped / "keep").read_bytes() == b"keep me\n"
    # the job, before stage_out, leaves a link that an earlier stage_out pair copies out
    owned(open_dir / "back")
    elsewhere = owned(open_dir / "back" / "elsewhere")
    as_user("mkdir", str(striped / "elsewhere"))  # l resolves inside the buffer where it is...
    as_user("ln", "-s", "elsewhere", str(striped / "l"))  # ...and to back/elsewhere, copied
    r = slurm(env, "data_out", 67, "--job", str(script), check=False)
    assert (r.returncode, r.stdout) == (
        1,
        stage_line(f"buffer 67: stage_out failed: {open_dir}/back/l: {LINK_ERROR}\n"),
    )
    assert os.listdir(elsewhere) == []
    slurm(env, "teardown", 67, "--job", str(script), "--hurry")
    next_job_runs(workdir, env, store, tmp_path, open_dir, 68)


def test_staging_a_list_that_is_a_link_or_names_links_is_not_followed(
    dac, open_dir, tmp_path, root_tree
):
    workdir, env, store = dac
    etc, before = root_tree
    src = owned(open_dir / "src")
    write(src / "data", b"d\n")
    os.symlink(str(etc), src / "l")
    listing = write(src / "list", f"{src}/l sub/l\n{src}/data sub/l/x\n".encode())
    os.symlink(str(listing), src / "list-link")
    script = setup(
        env,
        tmp_path,
        69,
        "512MiB",
        f"#DW stage_in type=list source={src}/list-link destination=$DW_JOB_STRIPED",
    )
    r = slurm(env, "data_in", 69, "--job", str(script), check=False)
    assert (r.returncode, r.stdout) == (
        1,
        stage_line(
            f"buffer 69: stage_in failed: {src}/list-link: a link; name the list file itself\n"
        ),
    )
    slurm(env, "teardown", 69, "--job", str(script), "--hurry")
    script = setup(
        env,
        tmp_path,
        70,
        "512MiB",
        f"#DW stage_in type=list source={listing} destination=$DW_JOB_STRIPED",
    )
    fs = buffer_fs(workdir, store, 70)
    r = slurm(env, "data_in", 70, "--job", str(script), check=False)
    assert (r.returncode, r.stdout) == (
        1,
        stage_line(f"buffer 70: stage_in failed: {fs}/striped/sub/l: {LINK_ERROR}\n"),
    )
    slurm(env, "teardown", 70, "--job", str(script), "--hurry")
    assert snapshot(etc) == before
    next_job_runs(workdir, env, store, tmp_path, open_dir, 71)
