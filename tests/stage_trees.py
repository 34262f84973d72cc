"""The tree the split-copy tests stage (tests/system/test_copy_share.py in-process,
tests/system/test_split_across.py across the local DAC's dacds), and what a copy made of it:
directories, small and big files, a sparse one, an empty one, a link, times set; every entry
owned by the job's user (UID:GID), as a stage's source is."""

import os
from pathlib import Path
from types import SimpleNamespace

from daccore.records.models import StageType

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
