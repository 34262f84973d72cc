"""The split copy (dacd/copy_share.py through dacd/staging_split.py) as real unprivileged
users run it: K in-process servers give the tree a single copier gives, byte for byte, with
its modes, times, ownership, links and holes; one failed share fails the stage naming it."""

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from daccore.errors import UserError
from daccore.records.models import StageType
from dacd import staging, staging_split

UID, GID = 1234, 4321
MiB = 1 << 20


def owned(path, mode=0o755):
    os.makedirs(path, exist_ok=True)
    os.chown(path, UID, GID)
    os.chmod(path, mode)
    return path


def write(path, data, mode=0o640, times=None):
    Path(path).write_bytes(data)
    os.chown(path, UID, GID)
    os.chmod(path, mode)
    if times:
        os.utime(path, ns=times)


def tree(src):
    owned(src)
    for d in range(3):
        owned(src / f"d{d}", 0o750)
        for f in range(150):
            write(src / f"d{d}" / f"f{f}", os.urandom(f * 13), 0o600 + (f % 2) * 0o44)
    write(src / "big", os.urandom(5 * MiB + 777), 0o604, (1_000_000_000, 2_000_000_000))
    with open(src / "sparse", "wb") as sparse:  # 64 MiB apparent, 2 extents of 3 MiB
        sparse.write(os.urandom(3 * MiB))
        sparse.seek(40 * MiB)
        sparse.write(os.urandom(3 * MiB))
        sparse.truncate(64 * MiB)
    os.chown(src / "sparse", UID, GID)
    write(src / "empty", b"")
    os.symlink("/etc/shadow", src / "link")
    os.lchown(src / "link", UID, GID)
    os.utime(src / "d1", ns=(5_000_000_000, 6_000_000_000))


def buffer_for(src):
    line = SimpleNamespace(
        type=StageType.DIRECTORY, source=str(src), destination="$DW_JOB_STRIPED/in"
    )
    return SimpleNamespace(
        owner_uid=UID, owner_gid=GID, request=SimpleNamespace(stage_in=[line], stage_out=[])
    )


def fs_root(path):
    owned(path, 0o755)
    owned(path / "striped", 0o700)
    return path


def seen(root):
    """Every entry below `root`: kind, mode, owner, mtime (a link's is when it was made, by
    either copy), and its bytes or link target."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            what = (
                os.readlink(p)
                if os.path.islink(p)
                else Path(p).read_bytes()
                if os.path.isfile(p)
                else None
            )
            mtime = None if os.path.islink(p) else st.st_mtime_ns
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_uid, st.st_gid, mtime, what)
    return out


@pytest.mark.parametrize("servers", [1, 2, 3, 5])
def test_a_split_copy_gives_the_tree_one_copier_gives(open_dir, servers):
    src = open_dir / "src"
    tree(src)
    one, split = fs_root(open_dir / "one"), fs_root(open_dir / "split")
    staging.stage(buffer_for(src), "in", str(one), 2, lambda p: None)
    progress: list[dict] = []
    staging_split.split_here(
        buffer_for(src), "in", str(split), 2, progress.append, 60, staging.Run(), servers, MiB
    )
    a, b = seen(one / "striped" / "in"), seen(split / "striped" / "in")
    assert a.keys() == b.keys() and len(a) == 3 + 450 + 4
    for name in a:
        assert a[name] == b[name], name
    blocks = os.stat(split / "striped" / "in" / "sparse").st_blocks * 512
    assert blocks <= 8 * MiB  # the holes stayed holes
    final = progress[-1]
    total = sum(f * 13 for f in range(150)) * 3 + 5 * MiB + 777 + 64 * MiB
    assert final == {
        "bytes_done": total,
        "bytes_total": total,
        "files_done": 450 + 4,
        "files_total": 450 + 4,
        "rate": final["rate"],
        "eta": 0.0,
        "counting": False,
    }
    assert all(p["bytes_total"] == total and p["bytes_done"] <= total for p in progress)


def test_a_failed_share_fails_the_stage_naming_the_server_and_the_path(open_dir):
    src = open_dir / "src"
    tree(src)
    secret = src / "d2" / "f8"  # 0600
    os.chown(secret, 0, 0)
    split = fs_root(open_dir / "split")
    with pytest.raises(UserError) as e:
        staging_split.split_here(
            buffer_for(src), "in", str(split), 2, lambda p: None, 60, staging.Run(), 3, MiB
        )
    assert str(e.value) in {
        f"stage_in failed on share{i}: {secret}: Permission denied" for i in range(3)
    }


def test_a_source_changed_after_the_plan_fails_the_share_not_the_copy(open_dir):
    src = open_dir / "src"
    tree(src)
    split = fs_root(open_dir / "split")
    run = staging.Run()
    plans: list[dict] = []
    result, _, rc = staging_split.lead(
        buffer_for(src), "in", str(split), 2, 2, plans.append, lambda p: None, 60, run, MiB
    )
    assert (rc, result) == (0, {"plan": result["plan"], "done": True})
    assert plans == [{**result["plan"], "split": MiB}]
    write(src / "d0" / "new", b"late")
    result, _, rc = staging_split.run_share(
        buffer_for(src), "in", str(split), 2, plans[0], 1, lambda p: None, 60, run
    )
    assert (rc, result) == (1, {"error": f"{src}: the source changed after the stage was planned"})
